package lm

import "unsafe"

// littleEndian is whether float32 bytes in a GGUF file (always little-endian)
// can be used in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// float32View reinterprets F32 tensor bytes as []float32 without copying,
// which is what lets a memory-mapped file's weights stay in the page cache
// only. It returns nil (the caller then copies) on a big-endian host or when
// the bytes are not 4-byte aligned.
func float32View(raw []byte) []float32 {
	if !littleEndian || len(raw) == 0 || uintptr(unsafe.Pointer(&raw[0]))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), len(raw)/4)
}
