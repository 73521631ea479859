package ctl

import (
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
		Summary: "signed over-the-air bundles: keygen, sign, verify",
		Subcommands: []*cli.Command{
			{Name: "keygen", Summary: "create the fleet's ed25519 signing key (ota-key.pem, ota-pub.pem)", Run: otaKeygen},
			{Name: "sign", Summary: "build a signed bundle from files", Run: otaSign},
			{Name: "verify", Summary: "verify a bundle as a device would", Run: otaVerify},
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
