// PortcullisAuth module
