/// Shared vocabulary for Portcullis modules: no I/O, no C.
public enum PortcullisCore {}
