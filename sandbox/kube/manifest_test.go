package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
)

// TestServerManifestsAccepted: the objects of deploy/kubernetes/server.yaml
// are accepted by the apiserver with strict field validation (a field
// misspelt or misplaced is refused, not dropped), and kustomization.yaml
// names files that are there.
func TestServerManifestsAccepted(t *testing.T) {
	ns, _, admin := namespace(t)
	data, err := os.ReadFile("../../deploy/kubernetes/server.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	kinds := map[string]bool{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc == nil {
			continue
		}
		kind, _ := doc["kind"].(string)
		body, _ := json.Marshal(doc)
		var client rest.Interface
		var resource string
		switch kind {
		case "Deployment":
			client, resource = admin.AppsV1().RESTClient(), "deployments"
		case "Service":
			client, resource = admin.CoreV1().RESTClient(), "services"
		case "PersistentVolumeClaim":
			client, resource = admin.CoreV1().RESTClient(), "persistentvolumeclaims"
		default:
			t.Fatalf("server.yaml holds a %s, which this test does not send", kind)
		}
		res := client.Post().Namespace(ns).Resource(resource).Param("fieldValidation", "Strict").
			SetHeader("Content-Type", "application/json").Body(body).Do(context.Background())
		if err := res.Error(); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		kinds[kind] = true
	}
	if !kinds["Deployment"] || !kinds["Service"] {
		t.Errorf("server.yaml lacks a Deployment or a Service: %v", kinds)
	}
	kust, err := os.ReadFile("../../deploy/kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, line := range strings.Split(string(kust), "\n") {
		switch {
		case line == "resources:":
			in = true
		case in && strings.HasPrefix(line, "- "):
			if _, err := os.Stat("../../deploy/kubernetes/" + strings.TrimPrefix(line, "- ")); err != nil {
				t.Errorf("kustomization.yaml: %v", err)
			}
		default:
			in = false
		}
	}
}
