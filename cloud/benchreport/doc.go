// Package benchreport runs Phaseless's benchmark suite and writes a
// Markdown report with PNG plots (phaselessctl bench report), so that the
// performance figures the README quotes can be regenerated on any machine.
//
// The built-in engine is measured in process (models/lm's Bench, as
// phaselessctl lm bench does). The transport, telemetry, fleet-ingest and
// scheduler figures come from the packages' own Go benchmarks, run with the
// go command in the source tree: the report runs exactly the commands the
// README names, and prints them. A simulator section appears when the
// phaselessctl at hand has a sim command.
package benchreport
