package cloud

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
)

// WorkerURL is one --worker value: an OpenAI-compatible server's URL and the
// options in its fragment (URL#role=prefill-heavy&model=NAME&capacity=N&gpu=h100).
type WorkerURL struct {
	raw      string
	base     string // the URL without its fragment
	host     string // its host, which names the worker
	role     sched.Role
	hasRole  bool
	model    string
	capacity int
	// gpu is the worker's GPU (#gpu=h100, or a sim:// worker's): the
	// priced policies price it by cloud/sim's profile of that GPU.
	gpu string
	tp  int          // a sim:// worker's GPUs per engine; 0 = the fewest that fit
	sim *sim.URLSpec // sim://GPU?model=M&n=N: simulated workers (cloud/sim)
	// key is the bearer token the worker wants (#key=): for another
	// phaseless-cloud with --api-keys, a role=worker key.
	key string
}

// WorkerURLs is the repeatable --worker flag: each value is parsed once, when
// it is set; a comma-separated value (as the environment gives it) adds
// several.
type WorkerURLs []WorkerURL

func (l *WorkerURLs) String() string {
	raw := make([]string, len(*l))
	for i, w := range *l {
		raw[i] = w.raw
	}
	return strings.Join(raw, ",")
}

// Set parses and adds one or more comma-separated worker URLs.
func (l *WorkerURLs) Set(v string) error {
	options := false // the previous piece had options: a key with a comma in it splits there
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		w, err := parseWorkerURL(s)
		if err != nil && options && !strings.Contains(s, "://") {
			return errors.New("the text after a comma in a worker URL's options is not a worker URL (not shown: it may be part of a key; write a comma in a key as %2C)")
		}
		if err != nil {
			return err
		}
		options = strings.Contains(s, "#")
		*l = append(*l, w)
	}
	return nil
}

// shownOptions are the worker URL options printed as given.
var shownOptions = map[string]bool{"role": true, "model": true, "capacity": true, "gpu": true}

// shownWorkerURL is the form of a worker URL its printed flag value and
// errors show. The options are read from the URL's decoded fragment, so
// that is what is redacted (a percent-encoded "%6Bey=" is a key as well):
// the key's value always, and with a key present every option that is not
// one of shownOptions, as a key with "&" or ";" in it falls apart into
// such pieces. A URL that does not parse shows no options at all.
func shownWorkerURL(s string, u *url.URL) string {
	base, _, ok := strings.Cut(s, "#")
	switch {
	case !ok:
		return s
	case u == nil:
		return base + "#REDACTED"
	}
	pairs := strings.FieldsFunc(u.Fragment, func(r rune) bool { return r == '&' || r == ';' })
	names := make([]string, len(pairs))
	keyed := false
	for i, p := range pairs {
		name, _, _ := strings.Cut(p, "=")
		n, err := url.QueryUnescape(name)
		if err != nil {
			n = "key" // unreadable: treated as the secret it may be
		}
		names[i], keyed = n, keyed || n == "key"
	}
	for i, n := range names {
		switch {
		case n == "key":
			pairs[i] = "key=REDACTED"
		case keyed && !shownOptions[n]:
			pairs[i] = "REDACTED"
		}
	}
	return base + "#" + strings.Join(pairs, "&")
}

func parseWorkerURL(s string) (WorkerURL, error) {
	if sim.IsURL(s) {
		spec, err := sim.ParseURL(s)
		if err != nil {
			return WorkerURL{}, err
		}
		return WorkerURL{raw: s, sim: &spec}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		u = nil
	}
	shown := shownWorkerURL(s, u) // the flag's value and errors never print the key
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return WorkerURL{}, fmt.Errorf("%q is not an http(s) URL", shown)
	}
	w := WorkerURL{raw: shown} // printed as the flag's value: never the key
	opts, err := url.ParseQuery(u.Fragment)
	if err != nil { // its text may quote a piece of the key
		return WorkerURL{}, fmt.Errorf("%q: options after # must be name=value pairs joined by &", shown)
	}
	_, keyed := opts["key"]
	for k, v := range opts {
		switch k {
		case "role":
			if w.role, err = sched.ParseRole(v[0]); err != nil {
				return WorkerURL{}, fmt.Errorf("%q: %v", shown, err)
			}
			w.hasRole = true
		case "model":
			w.model = v[0]
		case "key":
			w.key = v[0]
		case "gpu":
			if _, err := sim.LookupGPU(v[0]); err != nil {
				return WorkerURL{}, fmt.Errorf("%q: %v", shown, err)
			}
			w.gpu = v[0]
		case "capacity":
			if w.capacity, err = strconv.Atoi(v[0]); err != nil || w.capacity < 1 {
				return WorkerURL{}, fmt.Errorf("%q: capacity %q must be a positive integer", shown, v[0])
			}
		default:
			if keyed { // k may be a piece of the key
				return WorkerURL{}, fmt.Errorf("%q: an unknown option (role, model, capacity, gpu, key)", shown)
			}
			return WorkerURL{}, fmt.Errorf("%q: unknown option %q (role, model, capacity, gpu, key)", shown, k)
		}
	}
	u.Fragment = ""
	w.base, w.host = u.String(), u.Host
	return w, nil
}

// class is what the priced policies know of the worker's hardware: cloud/sim's
// roofline figures for its GPU serving its model (the llama3.1-8b profile
// when the model has none), at the profile's price; zero when no GPU was
// declared.
func (w *WorkerURL) class() sched.Class {
	g, err := sim.LookupGPU(w.gpu)
	if w.gpu == "" || err != nil {
		return sched.Class{}
	}
	m, err := sim.LookupModel(w.model)
	if err != nil {
		m, _ = sim.LookupModel("llama3.1-8b")
	}
	d, err := sim.NewDeployment(g, m, w.tp, sim.EngineConfig{})
	if err != nil {
		return sched.Class{} // the model does not fit the GPU: priced by load alone
	}
	return d.Class(g.PricePerHour)
}
