// Package bench is `acp-gateway-bench` (cmd/acp-gateway-bench): it measures
// the gateway against the transports a user could pick instead, on one
// workload, in one run. It is no part of the acp-gateway binary.
//
// A synthetic ACP agent (this package, run as `acp-gateway-bench agent`)
// plays a turn of tool-call updates, as fast as its output takes them or
// at a fixed rate, stamping each with its send time in
// _meta.bench.t (Unix nanoseconds, as a string). The same turns go through
//
//   - a pipe read by a child process that decodes every line (the floor);
//   - websocketd, read by a WebSocket client;
//   - the gateway (a child process, `acp-gateway-bench gateway`, assembled
//     by gateway/app as `acp-gateway serve` assembles it, with hooks serve
//     does not have: its heap after a GC, profiles on demand, its children
//     left after shutdown) with the memory store, through Connect JSON, Connect
//     binary, gRPC, and Connect binary without gzip, and ACP itself over
//     a WebSocket to its /acp;
//   - the gateway with the bolt store and with the Redis store;
//
// and the client notes when each update arrives. The gateway also serves
// one session to 1 to 1,000 Watch streams (fan-out), and then many
// sessions at once (scale: memory per session, create-to-first-event
// latency).
//
// CPU time and peak RSS are those of the process in the middle: the pipe
// reader (getrusage, VmHWM), websocketd and the gateway (the on-CPU time
// of their threads in /proc/PID/task/TID/schedstat, or utime+stime of
// /proc/PID/stat where schedstat is missing; VmHWM reset through
// clear_refs before each path). Agent processes and clients are never
// counted.
package bench
