package ui

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	tfleet "github.com/phaseless/phaseless/transport/fleetwire"
)

var funcs = template.FuncMap{
	"pct": func(v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return strconv.FormatFloat(v*100, 'f', 1, 64) + "%"
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return max(now.Sub(t).Round(time.Second), 0).String() + " ago"
	},
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"json": func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err.Error()
		}
		return string(b)
	},
	"ms": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " ms" },
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<30:
			return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + " GiB"
		case n >= 1<<20:
			return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
		case n >= 1<<10:
			return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
		}
		return strconv.FormatInt(n, 10) + " B"
	},
}

// routeMix counts where a device's recent requests ran.
type routeMix struct {
	Local, Cloud, Errors int
	// Lag is how long the newest record took from the device to the store:
	// large while a device drains an offline backlog.
	Lag time.Duration
}

func (m routeMix) Total() int { return m.Local + m.Cloud }

// LocalShare is the share of requests that ran on the device.
func (m routeMix) LocalShare() float64 {
	if m.Total() == 0 {
		return math.NaN()
	}
	return float64(m.Local) / float64(m.Total())
}

// requestRow is one recent request of a device.
type requestRow struct {
	At, Ingested time.Time
	tfleet.RequestRecord
}

// readRequests reads the request records stored since since (one device's
// or all), newest last.
func (s *Server) readRequests(r *http.Request, since time.Time, device string) (map[string][]requestRow, error) {
	var buf bytes.Buffer
	if _, err := s.cfg.Fleet.Export(r.Context(), &buf, since, device); err != nil {
		return nil, err
	}
	out := map[string][]requestRow{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var rec fleet.ExportedRecord
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Kind != "request" {
			continue
		}
		row := requestRow{At: rec.Time, Ingested: rec.IngestedAt}
		if json.Unmarshal(rec.Data, &row.RequestRecord) != nil {
			continue
		}
		out[rec.DeviceID] = append(out[rec.DeviceID], row)
	}
	return out, sc.Err()
}

func mixOf(rows []requestRow) routeMix {
	var m routeMix
	for _, r := range rows {
		switch {
		case r.Outcome == "error":
			m.Errors++
		case r.Ran() == "cloud":
			m.Cloud++
		default:
			m.Local++
		}
	}
	if n := len(rows); n > 0 {
		m.Lag = rows[n-1].Ingested.Sub(rows[n-1].At).Round(time.Millisecond)
	}
	return m
}

type deviceRow struct {
	*fleet.Device
	Mix routeMix
}

// deviceFilter is the device list's query: free text over id, version and
// board, and exact state.
type deviceFilter struct {
	Q, State string
}

func (f deviceFilter) match(d *fleet.Device) bool {
	if f.State != "" && d.State() != f.State {
		return false
	}
	if f.Q == "" {
		return true
	}
	hay := d.ID
	if d.Status != nil {
		hay += " " + d.Status.AgentVersion() + " " + d.Status.Installed() + " " + d.Status.Board + " " + d.Status.Slot
	}
	return strings.Contains(strings.ToLower(hay), strings.ToLower(f.Q))
}

// fleetDevices lists the registry, or answers the error page and
// reports false.
func (s *Server) fleetDevices(w http.ResponseWriter, r *http.Request) ([]*fleet.Device, bool) {
	if s.cfg.Fleet == nil {
		s.fail(w, r, http.StatusNotFound, errNoFleet)
		return nil, false
	}
	devs, err := s.cfg.Fleet.Devices()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return nil, false
	}
	return devs, true
}

func (s *Server) devices(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Fleet == nil && s.cfg.Cloud != nil {
		http.Redirect(w, r, "/ui/pools", http.StatusSeeOther) // a coordinator without a fleet manager
		return
	}
	devs, ok := s.fleetDevices(w, r)
	if !ok {
		return
	}
	reqs, err := s.readRequests(r, s.cfg.Now().Add(-s.cfg.RouteWindow), "")
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	f := deviceFilter{Q: r.URL.Query().Get("q"), State: r.URL.Query().Get("state")}
	var rows []deviceRow
	counts := map[string]int{}
	for _, d := range devs {
		counts[d.State()]++
		if f.match(d) {
			rows = append(rows, deviceRow{Device: d, Mix: mixOf(reqs[d.ID])})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	s.render(w, r, http.StatusOK, "devices", map[string]any{
		"Devices": rows, "Filter": f, "Counts": counts, "Total": len(devs), "Window": s.cfg.RouteWindow,
	})
}

// recentRequests is how many of a device's requests its page lists.
const recentRequests = 25

func (s *Server) device(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Fleet == nil {
		s.fail(w, r, http.StatusNotFound, errNoFleet)
		return
	}
	id := r.PathValue("id")
	d, err := s.cfg.Fleet.Device(id)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, fleet.ErrUnknownDevice) {
			status = http.StatusNotFound
		}
		s.fail(w, r, status, err)
		return
	}
	reqs, err := s.readRequests(r, s.cfg.Now().Add(-24*time.Hour), id)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	rows := reqs[id]
	mix := mixOf(rows)
	if len(rows) > recentRequests {
		rows = rows[len(rows)-recentRequests:]
	}
	for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
		rows[i], rows[j] = rows[j], rows[i]
	}
	s.render(w, r, http.StatusOK, "device", map[string]any{
		"Device": d, "History": s.cfg.Fleet.StatusHistory(id), "Requests": rows, "Mix": mix,
		"Sent": r.URL.Query().Get("sent"), "CommandError": r.URL.Query().Get("error"),
	})
}

// sendCommand takes the device page's form: a command name and k=v
// arguments, one per line. Only a device the fleet knows (one that has
// connected) gets a command: the fleet manager would otherwise create a
// record for whatever id the form names.
func (s *Server) sendCommand(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Fleet == nil {
		s.fail(w, r, http.StatusNotFound, errNoFleet)
		return
	}
	id := r.PathValue("id")
	if _, err := s.cfg.Fleet.Device(id); err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, fleet.ErrUnknownDevice) {
			status = http.StatusNotFound
		}
		s.fail(w, r, status, err)
		return
	}
	back := "/ui/devices/" + url.PathEscape(id) + "?"
	name := strings.TrimSpace(r.PostFormValue("name"))
	args := map[string]string{}
	for line := range strings.Lines(r.PostFormValue("args")) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			failAction(w, r, back, errors.New("argument "+line+" is not k=v"))
			return
		}
		args[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if name == "" {
		failAction(w, r, back, errors.New("a command needs a name"))
		return
	}
	cs, err := s.cfg.Fleet.SendCommand(r.Context(), id, name, args)
	if err != nil {
		failAction(w, r, back, err)
		return
	}
	http.Redirect(w, r, back+"sent="+url.QueryEscape(cs.ID), http.StatusSeeOther)
}

func (s *Server) pools(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Cloud == nil {
		s.fail(w, r, http.StatusNotFound, errors.New("no coordinator"))
		return
	}
	s.render(w, r, http.StatusOK, "pools", map[string]any{"Pools": s.cfg.Cloud.Pools(), "Workers": s.cfg.Cloud.Workers()})
}
