// Package local runs the device's own inference: a Runner puts a bounded
// queue in front of an engine — the built-in models/lm engine or an
// OpenAI-compatible server on the device (llama.cpp's server, a vendor NPU
// runtime) reached through OpenAI — so that a burst of requests gets clear
// "overloaded" errors instead of unbounded latency, and a client that goes
// away stops its generation.
//
// How it fits: agent/route's Dispatcher calls Runner.Generate for every
// request routed (or fallen back) to the device, and reads Runner.Load to
// decide whether the device is too busy.
package local
