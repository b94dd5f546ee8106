// PortcullisIO module
