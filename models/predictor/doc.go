// Package predictor is the device's routing model: given the feature vector
// of a request (models/textfeat), the probability that the request needs the
// cloud. It runs ONNX models with onnx-go and its gorgonnx backend.
//
// How it fits: agent/route holds a Swappable, asks it for a probability per
// request and, unless the operator set a threshold, compares it with the
// threshold the model carries in its ONNX metadata (MetaThreshold, read by
// Threshold; chosen on held-out data when the model was trained). The
// fleet's "reload model" command calls Swap with a new file;
// a file that fails to load, has the wrong input width, or answers outside
// [0,1] is refused and the old model keeps serving. The shipped model is
// embedded (Default) and reproduced by `phaselessctl model train`
// (models/predictor/train, which the agent never links).
//
// onnx-go v0.5.0 has three traps this package defends against:
//   - Gemm writes its result into the bias tensor when the batch is 1, so a
//     second run drifts. Every Gemm is rewritten into MatMul + Add at load
//     (transB, alpha and beta folded into the initializers).
//   - The graph is fixed at the first Run: every instance is built for batch 1
//     and run once at load, and Predict only ever feeds one row.
//   - A model instance is not safe for concurrent use: Model keeps a small
//     pool of instances, each used by one goroutine at a time.
package predictor
