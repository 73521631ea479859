// Package deploy holds what an operator deploys Phaseless with, checked by
// its tests: systemd units for an agent and a one-machine cloud (systemd/),
// Kubernetes manifests for a scaled cloud (k8s/: coordinator replicas
// sharing Redis, one fleet manager on an external Mosquitto broker, vLLM
// GPU workers), Grafana dashboards over the binaries' metrics (grafana/),
// a Prometheus scrape config that sends /metrics its key (prometheus/), and
// the container image builder (image/). docs/deploy.md walks from one
// machine to the cluster.
package deploy
