package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/pki"
)

// `pki` makes the fleet's mutual-TLS identities (transport/pki): a CA and the
// cloud's server certificate once per fleet, then one certificate per device
// whose CN is its id. phaseless-cloud --pki-dir and phaseless-agent --pki-dir
// --device-id read the same directory.
func init() {
	register(&cli.Command{Name: "pki", Summary: "fleet PKI: the CA, the cloud certificate and device certificates", Subcommands: []*cli.Command{
		{Name: "init", Summary: "create the fleet CA and the cloud server certificate in --dir", Run: pkiInit},
		{Name: "device", Summary: "issue a device certificate (CN = device id) from the CA in --dir", Run: pkiDevice},
		{Name: "revoke", Summary: "revoke a device (a stolen car): add it to --dir's deny list, which the cloud reloads by itself", Run: pkiRevoke},
	}})
}

func pkiFlags(fs *flag.FlagSet, cio cli.IO, args []string, usage string) (done bool, err error) {
	if err := cli.Parse(fs, args, cio.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cli.PrintUsage(cio.Stdout, fs, usage)
			return true, nil
		}
		return false, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("%w: unexpected argument %q", cli.ErrUsage, fs.Arg(0))
	}
	return false, nil
}

func pkiInit(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("pki init", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the fleet PKI (created, mode 0700)")
	var hosts cli.StringList
	fs.Var(&hosts, "host", "extra DNS name or IP address of the cloud for its certificate (repeatable; localhost, 127.0.0.1 and ::1 are always included)")
	if done, err := pkiFlags(fs, cio, args, "pki init --dir D [--host cloud.example.com --host 10.0.0.5 ...]"); done || err != nil {
		return err
	}
	if *dir == "" {
		return &cli.FieldError{Field: "dir", Err: errors.New("required")}
	}
	if err := pki.Init(*dir, hosts); err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "fleet CA:           %s (key %s — keep it offline)\n", filepath.Join(*dir, pki.CACertFile), filepath.Join(*dir, pki.CAKeyFile))
	fmt.Fprintf(cio.Stdout, "cloud certificate:  %s for %s\n", filepath.Join(*dir, pki.ServerCertFile), strings.Join(pki.ServerHosts(hosts), ", "))
	fmt.Fprintf(cio.Stdout, "next: phaselessctl pki device --dir %s --id ID, then phaseless-cloud --pki-dir %s\n", *dir, *dir)
	return nil
}

func pkiDevice(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("pki device", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory holding the fleet CA (from pki init)")
	id := fs.String("id", "", "device id: 1..64 letters, digits, '-', '_' or '.'; becomes the certificate's CN")
	if done, err := pkiFlags(fs, cio, args, "pki device --dir D --id ID"); done || err != nil {
		return err
	}
	if *dir == "" {
		return &cli.FieldError{Field: "dir", Err: errors.New("required")}
	}
	if *id == "" {
		return &cli.FieldError{Field: "id", Err: errors.New("required")}
	}
	if err := pki.IssueDevice(*dir, *id); err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "device %s: %s (key %s)\n", *id, filepath.Join(*dir, pki.DeviceCertFile(*id)), filepath.Join(*dir, pki.DeviceKeyFile(*id)))
	fmt.Fprintf(cio.Stdout, "next: phaseless-agent --pki-dir %s --device-id %s\n", *dir, *id)
	return nil
}
