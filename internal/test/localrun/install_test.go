package localrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadDocuments(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	t.Run("reads both webhook configurations of make manifests", func(t *testing.T) {
		mutating, validating, err := readWebhooks(filepath.Join(root, "config", "webhook", "manifests.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		m := make([]string, 0, len(mutating.Webhooks))
		v := make([]string, 0, len(validating.Webhooks))
		for _, h := range mutating.Webhooks {
			m = append(m, h.Name)
		}
		for _, h := range validating.Webhooks {
			v = append(v, h.Name)
		}
		if strings.Join(m, " ") != "mbackup.dbkeeper.io mdatabase.dbkeeper.io" || strings.Join(v, " ") != "vbackup.dbkeeper.io vdatabase.dbkeeper.io" {
			t.Errorf("mutating webhooks %q, validating %q; want those of Backups and Databases", m, v)
		}
	})
	t.Run("reads the deletion-protection policy and its binding", func(t *testing.T) {
		policy, binding, err := readPolicy(filepath.Join(root, "config", "policy", "deletion_protection.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(policy.Spec.Validations) == 0 || binding.Spec.PolicyName == "" {
			t.Errorf("policy %+v, binding %+v", policy.Spec, binding.Spec)
		}
	})
	t.Run("names the kind a file lacks", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "one.yaml")
		doc := "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: m}\n---\n# only a comment\n"
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := readWebhooks(file)
		if err == nil || !strings.HasSuffix(err.Error(), "lacks a ValidatingWebhookConfiguration") {
			t.Errorf("err = %v, want it to name the missing ValidatingWebhookConfiguration", err)
		}
	})
	t.Run("refuses a field the kind does not have", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "typo.yaml")
		doc := "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\nspec: {validashuns: []}\n"
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := readPolicy(file)
		if err == nil || !strings.Contains(err.Error(), `unknown field "validashuns"`) {
			t.Errorf("err = %v, want the unknown field named", err)
		}
	})
}
