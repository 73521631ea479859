package train

import (
	"fmt"

	"github.com/phaseless/phaseless/models/predictor"
)

// FleetScore is a router's result on the fleet's held-out slice (read by
// cloud/fleetapi/trainset), at the threshold it routes with.
type FleetScore struct {
	Name      string
	Threshold float64
	// Cloud and Local count the held-out requests by label.
	Cloud, Local int
	// CloudSent is the share of cloud-labelled requests (local answers
	// that were bad, failures) the router sends to the cloud; LocalKept the
	// share of local-labelled ones it keeps on the device.
	CloudSent, LocalKept float64
	// Balanced is their mean: what model evaluate compares.
	Balanced float64
}

// ScoreFleet scores p (routing to the cloud at or above threshold) on
// held-out fleet examples. Both labels must be present: a slice of one
// label cannot tell a better router from one that sends everything one way.
func ScoreFleet(name string, p predictor.Predictor, threshold float64, ex []Example) (FleetScore, error) {
	s := FleetScore{Name: name, Threshold: threshold}
	var sent, kept int
	for _, e := range ex {
		v, err := p.Predict(e.Features)
		if err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
		if e.Label > 0.5 {
			s.Cloud++
			if v >= threshold {
				sent++
			}
		} else {
			s.Local++
			if v < threshold {
				kept++
			}
		}
	}
	if s.Cloud == 0 || s.Local == 0 {
		return s, fmt.Errorf("the held-out slice has %d cloud-labelled and %d local-labelled requests: both are needed to compare routers", s.Cloud, s.Local)
	}
	s.CloudSent, s.LocalKept = float64(sent)/float64(s.Cloud), float64(kept)/float64(s.Local)
	s.Balanced = (s.CloudSent + s.LocalKept) / 2
	return s, nil
}
