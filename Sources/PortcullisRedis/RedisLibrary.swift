internal import CHiredis

/// The hiredis this binary was built with (hiredis has no runtime version call; its reader
/// is linked as built): `--version` and `portcullis_build_info`.
public enum RedisLibrary {
    public static var version: String { "\(HIREDIS_MAJOR).\(HIREDIS_MINOR).\(HIREDIS_PATCH)" }
}
