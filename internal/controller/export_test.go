package controller

// APIServer is the package's shared API server, for the external tests.
var APIServer = &apiServer
