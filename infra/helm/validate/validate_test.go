// Package validate renders the Helm chart (infra/helm/aside) with the real
// helm and decodes every document strictly, as the API server would refuse
// it: Kubernetes' own kinds with client-go's scheme in strict mode (an unknown
// or duplicate field, or a wrong type, is an error), the k6 operator's TestRun
// against its CRD's OpenAPI schema (unknown fields found by the API server's
// own pruning, types and enums by its schema validator). No cluster is needed.
package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	chartDir   = "../aside"
	crdFile    = "testdata/k6.io_testruns.yaml"
	release    = "aside"
	namespace  = "aside-lab"
	testRunAPI = "k6.io/v1alpha1"
)

// The value sets the chart is rendered with: its defaults, the production-like
// file, and the lab with every optional part on (the k6 TestRun included).
var renders = map[string][]string{
	"default":    nil,
	"production": {"-f", chartDir + "/values-production.yaml"},
	"lab-all": {"--set", "profile=lab", "--set", "k6.enabled=true", "--set", "k6.runId=check-1",
		"--set", "nodeExporter.enabled=true"},
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

// testRunSchema is the TestRun CRD's v1alpha1 schema, structural (for
// pruning) and as the API server's validator.
type testRunSchema struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
}

func loadTestRunSchema(t *testing.T) testRunSchema {
	t.Helper()
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		t.Fatalf("%s: %v", crdFile, err)
	}
	for _, version := range crd.Spec.Versions {
		if crd.Spec.Group+"/"+version.Name != testRunAPI || version.Schema == nil {
			continue
		}
		internal := &apiext.CustomResourceValidation{}
		if err := apiextv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(version.Schema, internal, nil); err != nil {
			t.Fatal(err)
		}
		structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			t.Fatal(err)
		}
		validator, _, err := validation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			t.Fatal(err)
		}
		return testRunSchema{structural: structural, validator: validator}
	}
	t.Fatalf("%s has no %s schema", crdFile, testRunAPI)
	return testRunSchema{}
}

// check returns why the TestRun document would be refused or changed by the
// API server: fields its schema does not know (which it would drop), then
// values of a wrong type or outside an enum.
func (s testRunSchema) check(doc []byte) error {
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return err
	}
	pruned := pruning.PruneWithOptions(runtime.DeepCopyJSON(obj), s.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(pruned) > 0 {
		return fmt.Errorf("unknown fields: %s", strings.Join(pruned, ", "))
	}
	if errs := validation.ValidateCustomResource(nil, obj, s.validator); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// checkDocument decodes one rendered document strictly; its kind and name for messages.
func checkDocument(doc []byte, testRuns testRunSchema) (string, error) {
	var meta typeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return "?", err
	}
	what := meta.Kind + "/" + meta.Metadata.Name
	if meta.APIVersion == testRunAPI && meta.Kind == "TestRun" {
		return what, testRuns.check(doc)
	}
	_, _, err := strictDecoder.Decode(doc, nil, nil)
	return what, err
}

func TestEveryRenderedDocumentDecodesStrictly(t *testing.T) {
	testRuns := loadTestRunSchema(t)
	for name, args := range renders {
		t.Run(name, func(t *testing.T) {
			docs := documents(t, render(t, args))
			if len(docs) < 10 {
				t.Fatalf("only %d documents rendered", len(docs))
			}
			kinds := map[string]int{}
			for _, doc := range docs {
				what, err := checkDocument(doc, testRuns)
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
			if name == "lab-all" && kinds["TestRun"] != 1 {
				t.Errorf("lab-all rendered %d TestRuns, want 1", kinds["TestRun"])
			}
		})
	}
}

// The checks above catch what they claim: each broken document below is
// refused, while a lenient decoder (client-go without strict mode; a plain
// JSON decoding of the TestRun) takes it silently.
func TestStrictDecodingRefusesUnknownFieldsAndWrongTypes(t *testing.T) {
	testRuns := loadTestRunSchema(t)
	lenient := serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer()
	broken := map[string]string{
		"unknown field": `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},
			"spec":{"replica":2,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i:1"}]}}}}`,
		"misplaced field": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"x"},
			"spec":{"ports":[{"port":80,"targetPort":"http","protocol":"TCP","nodePort":null,"path":"/"}]}}`,
		"wrong type": `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"x"},
			"spec":{"scaleTargetRef":{"kind":"Deployment","name":"x"},"minReplicas":"two","maxReplicas":3}}`,
		"duplicate field": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"A":"1"},"data":{"B":"2"}}`,
	}
	for name, doc := range broken {
		if _, err := checkDocument([]byte(doc), testRuns); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if name != "wrong type" {
			if _, _, err := lenient.Decode([]byte(doc), nil, nil); err != nil {
				t.Errorf("%s: the lenient decoder refused it too (%v): the document is not the one meant", name, err)
			}
		}
	}

	testRun := func(spec string) []byte {
		return []byte(`{"apiVersion":"k6.io/v1alpha1","kind":"TestRun","metadata":{"name":"x"},"spec":` + spec + `}`)
	}
	good := testRun(`{"parallelism":2,"script":{"localFile":"/scripts/read.js"},"runner":{"env":[{"name":"A","value":"1"}]}}`)
	if _, err := checkDocument(good, testRuns); err != nil {
		t.Fatalf("a valid TestRun refused: %v", err)
	}
	for name, spec := range map[string]string{
		"unknown field":        `{"parallelism":2,"script":{"localFile":"/s.js"},"paralellism":3}`,
		"unknown nested field": `{"parallelism":2,"script":{"localFile":"/s.js"},"runner":{"env":[{"name":"A","valu":"1"}]}}`,
		"wrong type":           `{"parallelism":"two","script":{"localFile":"/s.js"}}`,
		"missing required":     `{"parallelism":2}`,
	} {
		if _, err := checkDocument(testRun(spec), testRuns); err == nil {
			t.Errorf("TestRun with %s: accepted", name)
		}
	}
}
