// Package train makes the router predictor: it loads the routing corpus
// (RouteLLM MMLU, CLINC150), takes examples of the fleet's requests
// (read from its telemetry by cloud/fleetapi/trainset), trains a small MLP over
// textfeat vectors with gorgonia, writes it as ONNX, and evaluates routers
// with RouteLLM's metrics (APGR, CPT) and CLINC accuracy/AUC against the
// random and entropy-rule baselines.
//
// How it fits: phaselessctl `model train` and `model eval` call Run and
// Evaluate; the file they write is what models/predictor loads on the
// device. The agent must never link this package (gorgonia's solvers and
// autodiff would bloat it): agent/cmd/phaseless-agent/deps_test.go checks.
package train
