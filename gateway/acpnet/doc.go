// Package acpnet serves ACP itself on the gateway's port, at /acp: the
// WebSocket and Streamable HTTP profiles of ACP's "Streamable HTTP &
// WebSocket Transport" RFD. Every connection runs the mapping of package
// bridge (the one `acp-gateway connect` runs on stdio) over the gateway's
// own SessionService, which it calls in-process as the user that the
// connection's requests authenticated as: the user travels in the
// request's context, so no credential exists for a client to forge, and
// each call passes the service's interceptors as a network call would.
//
// /acp/AGENT runs agent AGENT; /acp the first agent by name, unless
// session/new names another in `_meta.acpGateway.agent`. Sessions outlive
// connections: they are the user's gateway sessions, which a later
// connection, the Connect API and the console see alike.
package acpnet
