// Package docscheck holds the documentation to the code: every flag,
// subcommand, metric family, x- header, endpoint and Go test that README.md
// and docs/*.md name must exist, and every subcommand and flag of every
// binary, every phaseless_ metric family they expose and every
// x-phaseless- header the code reads or writes, must be documented. Its test (docs_test.go) gathers the facts from
// the code itself — the binaries' flag sets and `--help` output, the /metrics
// pages of a real cloud, replica and agent on loopback, their HTTP routes,
// the header names and test functions in the Go source — and runs Check over
// the docs, so a doc that drifts from the code fails `make test`.
//
// # What counts as a mention
//
//   - A command: a code span or code-block line naming a binary
//     (phaselessctl, phaseless-agent, phaseless-cloud, with or without a
//     directory, after sudo), followed by its subcommand words (a|b|c
//     alternatives allowed) and flags; or a code span starting with a
//     phaselessctl command group and one of its subcommands ("fleet rollout
//     create --stages …"). Its flags must be flags of that command.
//   - A flag anywhere else: --name must be a flag of some binary or command,
//     except in a line or span that runs another program (go, curl, make,
//     kubectl, npm, …; see foreignTools).
//   - A metric family: phaseless_… with {a,b} alternatives after an
//     underscore, {labels} after a name, a trailing * or _ for a prefix, and
//     _bucket/_sum/_count of a histogram. A table whose first heading is
//     "old" lists retired names: its first column is not checked.
//   - A header: x-… in a code span or block.
//   - An endpoint: /v1/…, /ui/…, /metrics, /healthz, /readyz, /debug/… in a
//     code span or block; ID, NAME, {id} and <id> segments are placeholders.
//   - A Go test: TestX, FuzzX or BenchmarkX in a code span or block must be
//     a function of the module's tests, or a prefix of one (a -run pattern).
//
// # Runnable blocks
//
// A fenced block preceded by the line `<!-- docscheck: run -->` runs in
// TestRunnableBlocks on loopback, every line of it: phaselessctl lines in
// process (stdin from `echo …|` or `printf …|`), `phaseless-cloud …&` and
// `phaseless-agent …&` as daemons, `echo … > FILE`, `export NAME=VALUE`;
// `make build` and `go build` lines are skipped. Each block runs in a fresh
// directory that links the repository's top-level entries, with every port
// in it replaced by a free one. Mark a block only when all of it can run
// that way in seconds. A block preceded by `<!-- docscheck: walkthrough -->` is a
// step of the operator's walkthrough (docs/operator.md): its commands, in
// order, must be the commands TestOperatorWalkthrough runs.
package docscheck
