// PortcullisHTTP module
