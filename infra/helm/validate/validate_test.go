// Package validate renders the Helm chart (infra/helm/aside) with the real
// helm and decodes every document strictly, as the API server would refuse
// it: Kubernetes' own kinds with client-go's scheme in strict mode (an unknown
// or duplicate field, or a wrong type, is an error). The load Job, an Indexed
// Job of the bench's driver, is held to what its shards need besides. No
// cluster is needed.
package validate

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../aside"
	release   = "aside"
	namespace = "aside-lab"
)

// The value sets the chart is rendered with: its defaults, the production-like
// file, and the lab with every optional part on (the load Job included).
var renders = map[string][]string{
	"default":    nil,
	"production": {"-f", chartDir + "/values-production.yaml"},
	"lab-all": {"--set", "profile=lab", "--set", "load.enabled=true", "--set", "load.runId=check-1",
		"--set", "nodeExporter.enabled=true", "--set", "grafana.enabled=true"},
}

// helmBin is infra/install.sh's helm: $HELM, else $ASIDE_BIN_DIR/helm, else bin/helm.
func helmBin(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("HELM")}
	if dir := os.Getenv("ASIDE_BIN_DIR"); dir != "" {
		candidates = append(candidates, filepath.Join(dir, "helm"))
	}
	candidates = append(candidates, "../../../bin/helm")
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return c
		}
	}
	t.Fatalf("helm not found (HELM, $ASIDE_BIN_DIR/helm, bin/helm): run infra/install.sh helm")
	return ""
}

func render(t *testing.T, args []string) []byte {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// documents splits a multi-document YAML stream into JSON documents, skipping
// empty ones (a template that rendered nothing).
func documents(t *testing.T, stream []byte) [][]byte {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("splitting the rendered YAML: %v", err)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Fatalf("a rendered document is not valid YAML (or has a duplicate key): %v\n%s", err, doc)
		}
		if string(js) != "null" {
			docs = append(docs, js)
		}
	}
}

// strictDecoder is client-go's scheme with strict decoding.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// checkDocument decodes one rendered document strictly; its kind and name for
// messages, and the decoded object.
func checkDocument(doc []byte) (string, any, error) {
	var meta typeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return "?", nil, err
	}
	what := meta.Kind + "/" + meta.Metadata.Name
	obj, _, err := strictDecoder.Decode(doc, nil, nil)
	return what, obj, err
}

// loadJobs are the rendered Jobs of the load driver (component load).
func loadJobs(t *testing.T, args []string) []*batchv1.Job {
	t.Helper()
	var jobs []*batchv1.Job
	for _, doc := range documents(t, render(t, args)) {
		what, obj, err := checkDocument(doc)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if job, ok := obj.(*batchv1.Job); ok && job.Labels["app.kubernetes.io/component"] == "load" {
			jobs = append(jobs, job)
		}
	}
	return jobs
}

func TestEveryRenderedDocumentDecodesStrictly(t *testing.T) {
	for name, args := range renders {
		t.Run(name, func(t *testing.T) {
			docs := documents(t, render(t, args))
			if len(docs) < 10 {
				t.Fatalf("only %d documents rendered", len(docs))
			}
			kinds := map[string]int{}
			for _, doc := range docs {
				what, _, err := checkDocument(doc)
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
				kinds[strings.SplitN(what, "/", 2)[0]]++
			}
			for _, kind := range []string{"Deployment", "Service", "ConfigMap", "HorizontalPodAutoscaler", "NetworkPolicy", "Job"} {
				if kinds[kind] == 0 {
					t.Errorf("no %s rendered (%v)", kind, kinds)
				}
			}
			want := 0
			if name == "lab-all" {
				want = 1
			}
			if jobs := loadJobs(t, args); len(jobs) != want {
				t.Errorf("%s rendered %d load Jobs, want %d", name, len(jobs), want)
			}
		})
	}
}

// Grafana is AGPL-3.0: the chart's defaults (and the production-like file)
// render no object of it, no image, no Secret key, no NetworkPolicy peer;
// grafana.enabled=true renders it, which shows the search finds it.
func TestDefaultValuesRenderNoGrafana(t *testing.T) {
	for name, args := range renders {
		t.Run(name, func(t *testing.T) {
			var traces []string
			for _, doc := range documents(t, render(t, args)) {
				if bytes.Contains(bytes.ToLower(doc), []byte("grafana")) {
					what, _, _ := checkDocument(doc)
					traces = append(traces, what)
				}
			}
			switch {
			case name != "lab-all" && len(traces) > 0:
				t.Errorf("%s renders Grafana: %v", name, traces)
			case name == "lab-all" && !slices.Contains(traces, "Deployment/aside-grafana"):
				t.Errorf("grafana.enabled=true rendered no Deployment/aside-grafana (%v)", traces)
			}
		})
	}
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// The load Job runs every shard at once, from one common start, each pod one
// completion index, and nothing twice: the API server would take a Job that differs, so these are
// checked here.
func TestLoadJobRunsEachShardOnceAndAtOnce(t *testing.T) {
	for _, shards := range []string{"1", "2", "5"} {
		t.Run("shards="+shards, func(t *testing.T) {
			args := append(append([]string{}, renders["lab-all"]...), "--set", "load.shards="+shards)
			jobs := loadJobs(t, args)
			if len(jobs) != 1 {
				t.Fatalf("%d load Jobs rendered, want 1", len(jobs))
			}
			spec := jobs[0].Spec
			if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
				t.Errorf("completionMode %v, want Indexed", spec.CompletionMode)
			}
			if spec.Completions == nil || spec.Parallelism == nil ||
				*spec.Completions != *spec.Parallelism || strconv.Itoa(int(*spec.Completions)) != shards {
				t.Errorf("completions %v, parallelism %v, want both %s", spec.Completions, spec.Parallelism, shards)
			}
			if spec.BackoffLimit == nil || *spec.BackoffLimit != 0 {
				t.Errorf("backoffLimit %v, want 0", spec.BackoffLimit)
			}
			if spec.ActiveDeadlineSeconds == nil || *spec.ActiveDeadlineSeconds <= 30 || *spec.ActiveDeadlineSeconds > 3600 {
				t.Errorf("activeDeadlineSeconds %v: want a bound beyond the 30 s step", spec.ActiveDeadlineSeconds)
			}
			pod := spec.Template.Spec
			if pod.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("restartPolicy %q, want Never", pod.RestartPolicy)
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			env := envOf(c)
			if env["SHARDS"] != shards {
				t.Errorf("SHARDS %q, want %s", env["SHARDS"], shards)
			}
			// One start for every shard, ahead of the rendering (the driver
			// waits for it and refuses to start after it).
			if ms, err := strconv.ParseInt(env["START_AT"], 10, 64); err != nil || !time.UnixMilli(ms).After(time.Now()) {
				t.Errorf("START_AT %q: want a Unix time in ms ahead of the rendering", env["START_AT"])
			}
			if _, set := env["SHARD"]; set {
				t.Errorf("SHARD is set: every pod would send the same shard (the driver reads JOB_COMPLETION_INDEX)")
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %v: want a CPU request and a memory limit", c.Resources)
			}
			if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
				t.Errorf("the pods may run as root")
			}
			if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
				t.Errorf("the container's root filesystem is writable")
			}
			if len(jobs[0].Name) > 56 {
				t.Errorf("Job name %q: longer than 56, its pods' host names (<job>-<index>) would pass 63", jobs[0].Name)
			}
		})
	}
}

// The checks above catch what they claim: each broken document below is
// refused, while a lenient decoder (client-go without strict mode) takes it
// silently.
func TestStrictDecodingRefusesUnknownFieldsAndWrongTypes(t *testing.T) {
	lenient := serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer()
	broken := map[string]string{
		"unknown field": `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},
			"spec":{"replica":2,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i:1"}]}}}}`,
		"misplaced field": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"x"},
			"spec":{"ports":[{"port":80,"targetPort":"http","protocol":"TCP","nodePort":null,"path":"/"}]}}`,
		"wrong type": `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"x"},
			"spec":{"scaleTargetRef":{"kind":"Deployment","name":"x"},"minReplicas":"two","maxReplicas":3}}`,
		"duplicate field": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"A":"1"},"data":{"B":"2"}}`,
		"unknown Job field": `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"x"},
			"spec":{"completionMode":"Indexed","completion":2,"template":{"spec":{"containers":[{"name":"c","image":"i:1"}]}}}}`,
	}
	for name, doc := range broken {
		if _, _, err := checkDocument([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if name != "wrong type" {
			if _, _, err := lenient.Decode([]byte(doc), nil, nil); err != nil {
				t.Errorf("%s: the lenient decoder refused it too (%v): the document is not the one meant", name, err)
			}
		}
	}
}
