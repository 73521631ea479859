package ctl

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
)

func init() {
	register(&cli.Command{
		Name:    "ota",
		Summary: "signed over-the-air bundles: keygen, sign, verify, delta",
		Subcommands: []*cli.Command{
			{Name: "keygen", Summary: "create the fleet's ed25519 signing key (ota-key.pem, ota-pub.pem)", Run: otaKeygen},
			{Name: "sign", Summary: "build a signed bundle from files", Run: otaSign},
			{Name: "verify", Summary: "verify a bundle as a device would", Run: otaVerify},
			{Name: "delta", Summary: "bytes a device holding one file fetches to update it to another (chunked bundles)", Run: otaDelta},
			otaProbes,
		},
	})
}

func otaKeygen(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("ota keygen", flag.ContinueOnError)
	dir := fs.String("dir", ".", "directory for ota-key.pem and ota-pub.pem")
	if err := cli.ParseVerb(fs, cio, args, "ota keygen [--dir D]"); err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	keyPath := filepath.Join(*dir, "ota-key.pem")
	if _, err := os.Stat(keyPath); err == nil {
		return fmt.Errorf("%s exists; refusing to replace the fleet's signing key", keyPath)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PrivateKeyPEMType, Bytes: priv.Seed()}), 0o600); err != nil {
		return err
	}
	pubPath := filepath.Join(*dir, "ota-pub.pem")
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "wrote %s and %s\n", keyPath, pubPath)
	return nil
}

func otaSign(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("ota sign", flag.ContinueOnError)
	keyPath := fs.String("key", "ota-key.pem", "signing key from ota keygen")
	version := fs.String("version", "", "bundle version, e.g. 1.4.2")
	board := fs.String("board", "generic", "board profile")
	out := fs.String("out", "bundle.plota", "output file")
	kind := fs.String("kind", firmware.KindAgent, "what the bundle updates: agent (binary, A/B slot), predictor (router ONNX) or model (edge GGUF)")
	rollbackFrom := fs.String("rollback-from", "", "sign a rollback: the newer version this older bundle may replace (devices running exactly that version accept it; no other older bundle is ever installed)")
	if err := cli.ParseVerb(fs, cio, args, "ota sign --version V [--board B] [--kind K] [NAME=]FILE [[NAME=]FILE]"); err != nil {
		return err
	}
	if fs.NArg() == 0 || *version == "" {
		return fmt.Errorf("%w: ota sign --version V [--board B] [NAME=]FILE [[NAME=]FILE]", cli.ErrUsage)
	}
	key, err := firmware.ReadPrivateKey(*keyPath)
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	var names []string
	for _, arg := range fs.Args() {
		// NAME=PATH puts a file at NAME inside the slot; a plain path
		// keeps its base name.
		name, p, found := strings.Cut(arg, "=")
		if !found {
			name, p = filepath.Base(arg), arg
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[name] = b
		names = append(names, name)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := firmware.WriteManifest(f, key, firmware.Manifest{Version: *version, Board: *board, Kind: *kind, RollbackFrom: *rollbackFrom}, files, names); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	rollback := ""
	if *rollbackFrom != "" {
		rollback = ", a signed rollback from " + *rollbackFrom
	}
	fmt.Fprintf(cio.Stdout, "wrote %s: %s version %s, board %s, %d files%s\n", *out, *kind, *version, *board, len(names), rollback)
	// The chunks are what a device fetches of the files it lacks.
	bf, err := os.Open(*out)
	if err != nil {
		return err
	}
	defer bf.Close()
	m, err := firmware.Inspect(bf, nil)
	if err != nil {
		return err
	}
	for _, mf := range m.Files {
		fmt.Fprintf(cio.Stdout, "  %s: %d bytes in %d chunks (%s)\n", mf.Name, mf.Size, len(mf.Chunks), mf.Chunking)
	}
	return nil
}

func otaVerify(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("ota verify", flag.ContinueOnError)
	pubPath := fs.String("pub", "ota-pub.pem", "trusted public key")
	board := fs.String("board", "generic", "device board profile")
	running := fs.String("running", "0", "version the device runs")
	if err := cli.ParseVerb(fs, cio, args, "ota verify [--pub P] [--board B] [--running V] BUNDLE"); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: ota verify [--pub P] BUNDLE", cli.ErrUsage)
	}
	pub, err := firmware.ReadPublicKey(*pubPath)
	if err != nil {
		return err
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	v, err := firmware.Open(f, firmware.Policy{TrustedKey: pub, Board: *board, RunningVersion: *running})
	if err != nil {
		return err
	}
	if err := v.Extract(func(string) (firmware.WriteCloser, error) { return firmware.Discard(), nil }); err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "ok: version %s for %s, %d files verified\n", v.Manifest.Version, v.Manifest.Board, len(v.Manifest.Files))
	return nil
}

// otaDelta prices an update before it is rolled out: it signs NEW into a
// bundle (with a throwaway key; the signature's size is all that counts)
// and reports what a device that holds OLD fetches of it, against the
// whole bundle that a device without chunks (or without OLD) fetches.
func otaDelta(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("ota delta", flag.ContinueOnError)
	from := fs.String("from", "", "the file the device holds (the installed version)")
	if err := cli.ParseVerb(fs, cio, args, "ota delta --from OLD NEW"); err != nil {
		return err
	}
	if fs.NArg() != 1 || *from == "" {
		return fmt.Errorf("%w: ota delta --from OLD NEW", cli.ErrUsage)
	}
	old, err := os.ReadFile(*from)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	// The device cuts what it holds as the bundle names the file, so the
	// old file goes under the new one's name.
	name := filepath.Base(fs.Arg(0))
	var b bytes.Buffer
	if err := firmware.WriteManifest(&b, key, firmware.Manifest{Version: "1", Board: "any"}, map[string][]byte{name: data}, []string{name}); err != nil {
		return err
	}
	c, err := firmware.FetchCost(b.Bytes(), map[string][]byte{name: old})
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "%s from %s: whole bundle %d bytes; a device holding the old file fetches %d bytes (%.1f%%): header probe %d, %d of %d chunks (%d bytes)\n",
		fs.Arg(0), *from, c.Bundle, c.Fetch, 100*float64(c.Fetch)/float64(c.Bundle), c.Probe, c.NewChunks, c.Chunks, c.NewBytes)
	return nil
}
