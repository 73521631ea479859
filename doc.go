// Package phaseless is the root of an edge-and-cloud hybrid LLM inference
// system; it holds no code, only the house rules that layout_test.go checks
// for every package of the module.
//
// How it fits (DESIGN.md §3): transport/ holds what the agent and the cloud
// share — the wire formats (quic, httpapi, fleetwire, schedhint, pki), the
// canonical request and stream (llm) and the process contract of every
// binary (cli: flags, PHASELESS_* variables, YAML; metrics: the Prometheus
// exposition). models/ holds every learned or numeric artifact and the
// engines that run them. agent/ is the device side, cloud/ the coordinator
// side, firmware/ the OTA bundle format, examples/ runnable programs.
// transport and models import nothing from agent or cloud; agent and cloud
// never import each other; the agent links no training code.
package phaseless
