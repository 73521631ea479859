package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/pki"
)

// pkiRevoke puts a device on the fleet's deny list (pki.RevokedFile). A
// cloud whose --pki-dir is that directory (or holds a copy kept in sync)
// notices within a second, refuses the device on QUIC and MQTT and closes
// its open connections, without a restart.
func pkiRevoke(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("pki revoke", flag.ContinueOnError)
	dir := fs.String("dir", "", "the fleet PKI directory (the cloud's --pki-dir)")
	id := fs.String("id", "", "device id to revoke")
	reason := fs.String("reason", "", "why, for the record (one line)")
	if done, err := pkiFlags(fs, cio, args, "pki revoke --dir D --id ID [--reason TEXT]"); done || err != nil {
		return err
	}
	if *dir == "" {
		return &cli.FieldError{Field: "dir", Err: errors.New("required")}
	}
	if *id == "" {
		return &cli.FieldError{Field: "id", Err: errors.New("required")}
	}
	rev, err := pki.Revoke(*dir, *id, *reason, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "revoked device %s (certificate serial %s) in %s\n", rev.ID, rev.Serial, filepath.Join(*dir, pki.RevokedFile))
	fmt.Fprintf(cio.Stdout, "a cloud running with --pki-dir %s refuses it on QUIC and MQTT and closes its connections within %v\n", *dir, pki.DefaultWatchInterval)
	return nil
}
