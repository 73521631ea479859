package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/phaseless/phaseless/cloud"
)

// kinds maps apiVersion/kind to the k8s.io/api type a manifest must decode
// into; a kind missing here fails the test rather than going unchecked.
var kinds = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

type object struct {
	file, kind, name string
	v                any
}

// decodeManifests strictly decodes every document of every file in
// k8s/: YAML with a duplicate key, a field the API type does not have, or a
// value of the wrong type (a bad resource quantity, a string port where a
// number belongs) is an error.
func decodeManifests(t *testing.T) []object {
	t.Helper()
	files, _ := filepath.Glob("k8s/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests in k8s/")
	}
	var out []object
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			js, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				t.Errorf("%s doc %d: %v", f, i, err)
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name, Namespace string
				} `json:"metadata"`
			}
			json.Unmarshal(js, &head)
			mk := kinds[head.APIVersion+"/"+head.Kind]
			if mk == nil {
				t.Errorf("%s doc %d: %s/%s has no k8s.io/api type in this test", f, i, head.APIVersion, head.Kind)
				continue
			}
			v := mk()
			dec := json.NewDecoder(bytes.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				t.Errorf("%s doc %d (%s %s): %v", f, i, head.Kind, head.Metadata.Name, err)
				continue
			}
			if head.Metadata.Name == "" || (head.Kind != "Namespace" && head.Metadata.Namespace != "phaseless") {
				t.Errorf("%s doc %d: %s needs a name and namespace phaseless, has %+v", f, i, head.Kind, head.Metadata)
			}
			out = append(out, object{file: f, kind: head.Kind, name: head.Metadata.Name, v: v})
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func podSpec(o object) *corev1.PodTemplateSpec {
	switch v := o.v.(type) {
	case *appsv1.Deployment:
		return &v.Spec.Template
	case *appsv1.StatefulSet:
		return &v.Spec.Template
	}
	return nil
}

// TestKubernetesManifests checks the scaled cloud as the API server would
// see it, and what the Phaseless binaries need of it: every workload's
// selector matches its pods, every Service selects some workload and
// targets a named port that exists, every volume a container mounts is
// declared, the coordinators are several replicas sharing Redis with no
// fleet manager of their own, the fleet manager is one replica on the
// external broker, and every phaseless-cloud argument is a flag the binary
// has and that validates.
func TestKubernetesManifests(t *testing.T) {
	objs := decodeManifests(t)
	ports := map[string]map[string]bool{} // workload labels name → container port names
	var coordinators, fleets int
	for _, o := range objs {
		tpl := podSpec(o)
		if tpl == nil {
			continue
		}
		var sel map[string]string
		replicas := int32(1)
		switch v := o.v.(type) {
		case *appsv1.Deployment:
			sel = v.Spec.Selector.MatchLabels
			if v.Spec.Replicas != nil {
				replicas = *v.Spec.Replicas
			}
		case *appsv1.StatefulSet:
			sel = v.Spec.Selector.MatchLabels
			if v.Spec.Replicas != nil {
				replicas = *v.Spec.Replicas
			}
			if v.Spec.ServiceName == "" {
				t.Errorf("%s: StatefulSet without serviceName", o.name)
			}
		}
		for k, want := range sel {
			if tpl.Labels[k] != want {
				t.Errorf("%s: selector %s=%s does not match the pod labels %v", o.name, k, want, tpl.Labels)
			}
		}
		name := sel["app.kubernetes.io/name"]
		ports[name] = map[string]bool{}
		vols := map[string]bool{}
		for _, v := range tpl.Spec.Volumes {
			vols[v.Name] = true
		}
		if st, ok := o.v.(*appsv1.StatefulSet); ok {
			for _, c := range st.Spec.VolumeClaimTemplates {
				vols[c.Name] = true
			}
		}
		for _, c := range tpl.Spec.Containers {
			if c.Image == "" || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s/%s: needs an image and a memory request", o.name, c.Name)
			}
			for _, p := range c.Ports {
				ports[name][p.Name] = true
			}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s/%s mounts undeclared volume %q", o.name, c.Name, m.Name)
				}
			}
			if !strings.HasPrefix(c.Image, "phaseless/phaseless-cloud") {
				continue
			}
			cfg := cloudArgs(t, o.name, c.Args)
			switch o.name {
			case "phaseless-coordinator":
				coordinators = int(replicas)
				if cfg.Redis.URL == nil || cfg.MQTT != "" || cfg.MQTTURL.URL != nil || len(cfg.Workers) < 2 || cfg.Dev {
					t.Errorf("coordinators must share Redis, run no fleet manager and use the vLLM workers: %+v", cfg)
				}
				for _, w := range strings.Split(cfg.Workers.String(), ",") {
					if !strings.Contains(w, ".vllm.phaseless.svc:8000") {
						t.Errorf("worker %s is not a vLLM pod", w)
					}
				}
			case "phaseless-fleet":
				fleets = int(replicas)
				if cfg.MQTTURL.URL == nil || cfg.MQTT != "" || cfg.QUIC != "" {
					t.Errorf("the fleet manager must use the external broker only: %+v", cfg)
				}
			}
		}
		if tpl.Spec.Containers[0].Name == "vllm" && tpl.Spec.Containers[0].Resources.Limits.Name("nvidia.com/gpu", "").Value() != 1 {
			t.Errorf("vLLM pods need one GPU each")
		}
	}
	if coordinators < 2 || fleets != 1 {
		t.Errorf("%d coordinator replicas (want several), %d fleet managers (want 1)", coordinators, fleets)
	}
	for _, o := range objs {
		svc, ok := o.v.(*corev1.Service)
		if !ok {
			continue
		}
		target := svc.Spec.Selector["app.kubernetes.io/name"]
		if ports[target] == nil {
			t.Errorf("Service %s selects %q, which no workload has", o.name, target)
			continue
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.StrVal != "" && !ports[target][p.TargetPort.StrVal] {
				t.Errorf("Service %s targets port %q that %s does not declare", o.name, p.TargetPort.StrVal, target)
			}
		}
	}
}

// cloudArgs parses a container's phaseless-cloud arguments with the
// binary's own flag set and validates the result. $(VAR) references
// (Kubernetes expands them from env) stand for a plausible value.
func cloudArgs(t *testing.T, who string, args []string) cloud.Config {
	t.Helper()
	var cfg cloud.Config
	fs := flag.NewFlagSet(who, flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	cfg.RegisterFlags(fs)
	var log string
	fs.StringVar(&log, "log-format", "", "")
	var expanded []string
	for _, a := range args {
		expanded = append(expanded, regexp.MustCompile(`\$\([A-Z_]+\)`).ReplaceAllString(a, "mqtt://user:pass@mosquitto:1883"))
	}
	if err := fs.Parse(expanded); err != nil {
		t.Errorf("%s: %v", who, err)
		return cfg
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("%s: %v", who, fmt.Errorf("config does not validate: %w", err))
	}
	return cfg
}
