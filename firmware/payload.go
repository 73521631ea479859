package firmware

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"path"
	"strings"
)

// ReadPayload verifies a bundle held in memory against key as a device
// would, for any board and version, and returns its manifest and the first
// payload whose name ends in ext (case-insensitive, e.g. ".onnx"), its size
// and sha256 checked against the signed manifest. It is for tools that use
// an artifact without installing it: phaselessctl model evaluate reads the
// router the fleet runs from its bundle.
func ReadPayload(bundle []byte, key ed25519.PublicKey, ext string) (Manifest, []byte, error) {
	if key == nil {
		return Manifest{}, nil, errors.New("no key to verify the bundle with")
	}
	m, err := Inspect(bytes.NewReader(bundle), key)
	if err != nil {
		return Manifest{}, nil, err
	}
	// The policy only checks the board here: any version is acceptable.
	v, err := Open(bytes.NewReader(bundle), Policy{TrustedKey: key, Board: m.Board, anyVersion: true})
	if err != nil {
		return Manifest{}, nil, err
	}
	var out *bytes.Buffer
	err = v.Extract(func(name string) (io.WriteCloser, error) {
		if out == nil && strings.EqualFold(path.Ext(name), ext) {
			out = new(bytes.Buffer)
			return nopWriteCloser{out}, nil
		}
		return Discard(), nil
	})
	if err != nil {
		return Manifest{}, nil, err
	}
	if out == nil {
		return Manifest{}, nil, errors.New("the bundle has no " + ext + " file")
	}
	return v.Manifest, out.Bytes(), nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
