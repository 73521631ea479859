"""Regenerates the PyTorch-exported fixtures for predictor_test.go.

Run with Debian's python3-torch (1.13): /usr/bin/python3 make_torch_fixture.py 83
It writes torch_mlp_opset{11,13}.onnx (nn.Linear exports as Gemm with transB=1)
and torch_mlp_expected.json: inputs and torch's outputs, which the Go test
compares against onnx-go after the Gemm rewrite.
"""
import json
import math
import sys

import torch

dim = int(sys.argv[1])
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(dim, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1), torch.nn.Sigmoid())
net.eval()
inputs = [[math.sin(0.37 * (i + 1) * (j + 1)) * (i + 1) for j in range(dim)] for i in range(4)]
with torch.no_grad():
    out = net(torch.tensor(inputs, dtype=torch.float32)).reshape(-1).tolist()
for opset in (11, 13):
    torch.onnx.export(net, torch.zeros(1, dim), f"torch_mlp_opset{opset}.onnx", opset_version=opset,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
json.dump({"torch": torch.__version__, "inputs": inputs, "outputs": out}, open("torch_mlp_expected.json", "w"))
