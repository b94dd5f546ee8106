// PortcullisProxy module
