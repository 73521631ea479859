package firmware

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ChunkingONNX cuts an ONNX model at the first and past the last byte of
// each initializer (a weight tensor, ModelProto.graph.initializer), and
// every ggufSplit bytes inside one: a router whose output layer or
// threshold alone changed shares its first layer's chunk with the
// installed one, which content-defined chunking (16 KiB at the least) of
// a 58 KB file cannot do. What lies between initializers (the nodes, the
// inputs, the metadata) is cut only there, so a changed threshold costs
// the chunk from the last initializer to the end.
const ChunkingONNX = "onnx-tensors-v1"

// ONNX protobuf field numbers (onnx.proto3): ModelProto.graph,
// GraphProto.initializer.
const (
	onnxModelGraph       = 7
	onnxGraphInitializer = 5
)

// maxONNXCut bounds the ONNX files cut by their tensors (they are read
// whole to be parsed); a bigger one is cut by content.
const maxONNXCut = 64 << 20

// onnxCuts is where ChunkingONNX cuts data: the offsets, in the whole
// file, at which each initializer field of the graph begins and ends. It
// fails on anything that does not parse as protobuf through the graph, or
// holds no initializer.
func onnxCuts(data []byte) ([]int64, error) {
	var cuts []int64
	graphs := 0
	err := walkFields(data, 0, func(num protowire.Number, at int, field, value []byte) error {
		if num != onnxModelGraph {
			return nil
		}
		if value == nil {
			return errors.New("onnx: graph is not a message")
		}
		graphs++
		base := at + len(field) - len(value) // where the graph's bytes start
		return walkFields(value, base, func(num protowire.Number, at int, field, value []byte) error {
			if num == onnxGraphInitializer {
				cuts = append(cuts, int64(at), int64(at+len(field)))
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if graphs != 1 || len(cuts) == 0 {
		return nil, fmt.Errorf("onnx: %d graphs, %d initializers", graphs, len(cuts)/2)
	}
	return cuts, nil
}

// walkFields calls fn for each field of the protobuf message b, which
// begins at offset base of the file: its number, its offset, the whole
// field (tag included) and, for a length-delimited field, its value.
func walkFields(b []byte, base int, fn func(num protowire.Number, at int, field, value []byte) error) error {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return fmt.Errorf("onnx: field at %d: %w", base+off, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
		if m < 0 {
			return fmt.Errorf("onnx: field %d at %d: %w", num, base+off, protowire.ParseError(m))
		}
		field := b[off : off+n+m]
		var value []byte
		if typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b[off+n:])
			value = b[off+n+k-len(v) : off+n+k]
			if value == nil {
				value = []byte{}
			}
		}
		if err := fn(num, base+off, field, value); err != nil {
			return err
		}
		off += n + m
	}
	return nil
}
