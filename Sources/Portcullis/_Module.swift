// Portcullis module
