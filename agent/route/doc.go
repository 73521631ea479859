// Package route decides, per request, whether the device answers locally or
// offloads to the cloud, and then carries the decision out.
//
// How it fits: the agent's HTTP API (transport/httpapi) calls a Dispatcher as
// its llm.Generator. The Dispatcher asks the Router for a Decision — the
// request's normalised feature vector (models/textfeat) through the predictor
// gives the probability that the cloud is needed; that probability, with
// threshold and hysteresis, combined with the uplink's state (connected, RTT,
// loss) and the local engine's load (queue, KV faults per ms) picks a path —
// then streams the tokens of the chosen engine straight through. A cloud that
// fails before its first token is replaced by the local engine (and the
// response says so in x-fallback-reason); a failure after tokens were sent is
// returned as is, so the API ends the stream with an error event rather than
// restarting it and duplicating the prefix. Every request, whatever its
// outcome, becomes one fleet.RequestRecord for telemetry.
//
// Without a predictor model the Router uses the source articles' rule: input
// byte entropy above 4.2 bits per character goes to the cloud.
package route
