package agent

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/lmtrain"
)

// TestModelsListEdgeSampling: the agent's /v1/models lists the shipped edge
// model with the sampling its file declares for requests that omit theirs.
func TestModelsListEdgeSampling(t *testing.T) {
	_, url := startAgent(t, testConfig(t))
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Data []struct {
			ID       string
			Sampling json.RawMessage
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || len(l.Data) != 2 {
		t.Fatalf("%v %+v", err, l)
	}
	want, _ := json.Marshal(lmtrain.ShippedSampling())
	if l.Data[1].ID != edgemodel.Name || string(l.Data[1].Sampling) != string(want) {
		t.Fatalf("listed %s with sampling %s, want %s with %s", l.Data[1].ID, l.Data[1].Sampling, edgemodel.Name, want)
	}
}
