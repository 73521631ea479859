package firmware

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// signedBundle frames manifest bytes as a bundle signed by priv, followed by
// payload: what a fleet operator's key would produce for that manifest.
func signedBundle(priv ed25519.PrivateKey, manifest, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString(magic)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(manifest)))
	b.Write(manifest)
	b.Write(ed25519.Sign(priv, manifest))
	b.Write(payload)
	return b.Bytes()
}

// FuzzManifest signs whatever manifest the fuzzer makes with the trusted
// test key, so every input gets past the signature into the manifest
// parser, its path and size checks, and extraction into a real slot
// directory. Accepted manifests must name only local, distinct, bounded
// files, and extraction must write nothing outside the slot.
func FuzzManifest(f *testing.F) {
	pub, priv := newKey(f)
	m := func(files ...File) []byte {
		b, _ := json.Marshal(Manifest{Version: "1.0", Board: "rpi4", Files: files})
		return b
	}
	sum := "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")
	f.Add(m(File{Name: "bin/agent", Size: 5, SHA256: sum}), []byte("hello"))
	f.Add(m(File{Name: "../escape", Size: 5, SHA256: sum}), []byte("hello"))
	f.Add(m(File{Name: "/etc/passwd", Size: 5, SHA256: sum}), []byte("hello"))
	f.Add(m(File{Name: "a", Size: 5, SHA256: sum}, File{Name: "a", Size: 5, SHA256: sum}), []byte("hellohello"))
	f.Add(m(File{Name: "a", Size: maxFileSize + 1, SHA256: sum}), []byte("hello"))
	f.Add(m(File{Name: ".", Size: 5, SHA256: sum}), []byte("hello"))
	f.Add(m(File{Name: "a/./b", Size: 5, SHA256: sum}), []byte("hello"))
	// Chunk lists: one that matches, one whose sizes do not add up, one
	// whose hash lies (Extract must refuse it).
	f.Add(m(File{Name: "a", Size: 5, SHA256: sum, Chunking: ChunkingCDC, Chunks: []Chunk{{Size: 5, SHA256: sum}}}), []byte("hello"))
	f.Add(m(File{Name: "a", Size: 5, SHA256: sum, Chunking: ChunkingCDC, Chunks: []Chunk{{Size: 4, SHA256: sum}}}), []byte("hello"))
	f.Add(m(File{Name: "a", Size: 5, SHA256: sum, Chunking: ChunkingCDC, Chunks: []Chunk{{Size: 2, SHA256: sum}, {Size: 3, SHA256: sum}}}), []byte("hello"))
	f.Add([]byte(`{"version":"1.0","board":"rpi4","files":[{"name":"x\\..\\y","size":0,"sha256":"`+strings.Repeat("0", 64)+`"}]}`), []byte{})
	f.Fuzz(func(t *testing.T, manifest, payload []byte) {
		if len(manifest) == 0 || len(manifest) > maxManifest {
			return
		}
		v, err := Open(bytes.NewReader(signedBundle(priv, manifest, payload)), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "0.1"})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrWrongBoard) && !errors.Is(err, ErrNotNewer) {
				t.Fatalf("signed manifest refused with an unexpected error: %v", err)
			}
			return
		}
		files := v.Manifest.Files
		if len(files) == 0 || len(files) > maxFiles {
			t.Fatalf("accepted %d files", len(files))
		}
		seen := map[string]bool{}
		for _, f := range files {
			local := filepath.FromSlash(f.Name)
			if !filepath.IsLocal(local) || filepath.Clean(local) != local || local == "." || seen[f.Name] {
				t.Fatalf("accepted unsafe or repeated name %q", f.Name)
			}
			seen[f.Name] = true
			if f.Size < 0 || f.Size > maxFileSize {
				t.Fatalf("accepted size %d", f.Size)
			}
			var sum int64
			for _, c := range f.Chunks {
				if c.Size <= 0 || c.Size > maxChunk {
					t.Fatalf("accepted chunk size %d", c.Size)
				}
				sum += c.Size
			}
			if len(f.Chunks) > 0 && sum != f.Size {
				t.Fatalf("accepted chunks of %d bytes for a file of %d", sum, f.Size)
			}
		}
		root := t.TempDir()
		s, err := OpenSlots(filepath.Join(root, "slots"), "0.1")
		if err != nil {
			t.Fatal(err)
		}
		slot, err := s.Install(v)
		if err != nil {
			return // a payload that does not match; the slot is discarded
		}
		entries, err := os.ReadDir(filepath.Join(root, "slots"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if n := e.Name(); n != "a" && n != "b" && n != "state.json" && n != "state.lock" {
				t.Fatalf("install left %q beside the slots", n)
			}
		}
		if top, _ := os.ReadDir(root); len(top) != 1 {
			t.Fatalf("install wrote outside the slot directory: %v", top)
		}
		for _, f := range files {
			st, err := os.Stat(filepath.Join(s.Path(slot), filepath.FromSlash(f.Name)))
			if err != nil || st.Size() != f.Size {
				t.Fatalf("installed %q: %v", f.Name, err)
			}
		}
	})
}

// FuzzSlotState: state.json is on the device's disk, where a bad write or a
// bad flash cell can put anything. Whatever it holds, OpenSlots refuses it
// or yields a state whose boot slot is a or b, with a bounded trial.
func FuzzSlotState(f *testing.F) {
	f.Add([]byte(`{"active":"a","versions":{"a":"1.0"}}`))
	f.Add([]byte(`{"active":"b","trial":"a","boots":2,"versions":{"a":"1.1","b":"1.0"}}`))
	f.Add([]byte(`{"active":"a","trial":"../../etc","boots":1,"versions":{}}`))
	f.Add([]byte(`{"active":"a","trial":"a","boots":-5}`))
	f.Add([]byte(`{"active":"c"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, state []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "state.json"), state, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSlots(dir, "0.1")
		if err != nil {
			return
		}
		st := s.State()
		if st.Active != "a" && st.Active != "b" {
			t.Fatalf("active slot %q", st.Active)
		}
		if st.Trial != "" && (st.Trial == st.Active || (st.Trial != "a" && st.Trial != "b")) {
			t.Fatalf("trial slot %q with active %q", st.Trial, st.Active)
		}
		if st.Boots < 0 || st.Boots > MaxTrialBoots {
			t.Fatalf("trial boots %d", st.Boots)
		}
		for range MaxTrialBoots + 1 {
			slot, _, err := s.Boot()
			if err != nil {
				t.Fatal(err)
			}
			if slot != "a" && slot != "b" {
				t.Fatalf("boots slot %q", slot)
			}
		}
		if st := s.State(); st.Trial != "" {
			t.Fatalf("still on trial after %d boots: %+v", MaxTrialBoots+1, st)
		}
	})
}

// FuzzReadKey: key files are PEM from an operator's disk or a bundle tool;
// anything else is an error, never a panic or a key of the wrong size.
func FuzzReadKey(f *testing.F) {
	pub, priv := newKey(f)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: PublicKeyPEMType, Bytes: pub}))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: PrivateKeyPEMType, Bytes: priv.Seed()}))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: PublicKeyPEMType, Bytes: pub[:5]}))
	f.Add([]byte("-----BEGIN ED25519 PUBLIC KEY-----\nAAAA\n-----END ED25519 PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "key.pem")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if k, err := ReadPublicKey(path); err == nil && len(k) != ed25519.PublicKeySize {
			t.Fatalf("public key of %d bytes", len(k))
		}
		if k, err := ReadPrivateKey(path); err == nil && len(k) != ed25519.PrivateKeySize {
			t.Fatalf("private key of %d bytes", len(k))
		}
	})
}

// FuzzArtifactState: whatever state.json holds, OpenArtifacts opens (a
// damaged state is set aside, never fatal) and names only versions, which
// are directory names under the store.
func FuzzArtifactState(f *testing.F) {
	f.Add([]byte(`{"current":"1.2","previous":"1.1","failed":"1.3"}`))
	f.Add([]byte(`{"current":"../../etc"}`))
	f.Add([]byte(`{"current":"v1.2"}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, state []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "state.json"), state, 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := OpenArtifacts(dir)
		if err != nil {
			t.Fatal(err)
		}
		st := a.State()
		for _, v := range []string{st.Current, st.Previous, st.Failed} {
			if v == "" {
				continue
			}
			if _, err := ParseVersion(v); err != nil || filepath.Dir(a.Path(v)) != dir {
				t.Fatalf("state names %q", v)
			}
		}
	})
}

// FuzzReadPayload: a bundle read into memory by a tool (the fleet's router
// fetched from the cloud) is outside bytes; ReadPayload returns an error,
// or a payload only for a bundle the trusted key signed.
func FuzzReadPayload(f *testing.F) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	var signed bytes.Buffer
	if err := WriteKind(&signed, priv, KindPredictor, "1.1", "rpi4", map[string][]byte{"predictor.onnx": []byte("onnx"), "README": []byte("x")}, []string{"README", "predictor.onnx"}); err != nil {
		f.Fatal(err)
	}
	f.Add(signed.Bytes())
	f.Add(signed.Bytes()[:signed.Len()-2])
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, onnx, err := ReadPayload(b, pub, ".onnx")
		if err != nil {
			return
		}
		if _, err := Inspect(bytes.NewReader(b), pub); err != nil || m.Version == "" || onnx == nil {
			t.Fatalf("accepted %q: manifest %+v, payload %q, signature %v", b, m, onnx, err)
		}
	})
}

// FuzzONNXCuts: a .onnx file in a bundle, or on the device, is outside
// bytes that ChunkFile parses (ChunkingONNX). Whatever they are, it cuts
// them into chunks that cover the file exactly, each within the bound a
// manifest allows, or it falls back to content-defined chunking.
func FuzzONNXCuts(f *testing.F) {
	shipped, err := os.ReadFile("../models/predictor/predictor.onnx")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	f.Add(shipped[:len(shipped)/2])
	// ModelProto{graph: GraphProto{initializer: {}, initializer: {name: "w"}}}.
	f.Add([]byte{0x3a, 0x07, 0x2a, 0x00, 0x2a, 0x03, 0x42, 0x01, 'w'})
	f.Add([]byte{0x3a, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		cuts, err := onnxCuts(data)
		if err == nil {
			for _, c := range cuts {
				if c < 0 || c > int64(len(data)) {
					t.Fatalf("cut %d outside %d bytes", c, len(data))
				}
			}
		}
		chunking, chunks, err := ChunkFile("router.onnx", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if (chunking == ChunkingONNX) != (cuts != nil) {
			t.Fatalf("chunking %s with cuts %v", chunking, cuts)
		}
		f := File{Name: "router.onnx", Size: int64(len(data)), Chunking: chunking, Chunks: chunks}
		if len(data) > 0 {
			if err := f.checkChunks(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
