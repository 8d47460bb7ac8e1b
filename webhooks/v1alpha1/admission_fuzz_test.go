package v1alpha1

import (
	"context"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// FuzzAdmission sends arbitrary bytes as the object (and old object) of
// admission requests through the guarded defaulting and validating
// handlers, as the webhook server does with what the API server forwards:
// whatever the JSON, the answer is never a 5xx (which the handlers give for
// a recovered panic) and a refusal always says why.
func FuzzAdmission(f *testing.F) {
	seeds := []string{
		`{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","metadata":{"name":"orders","namespace":"shop"},"spec":{"engine":"postgres"}}`,
		`{"metadata":{"name":"orders"},"spec":{"engine":"mysql","version":"8.0","replicas":3,"storage":{"size":"10Gi"},"resources":{"requests":{"cpu":"500m","memory":"1Gi"},"limits":{"memory":"1Gi"}}}}`,
		`{"metadata":{"name":"orders"},"spec":{"storage":{"size":"1e-999999999"}}}`,
		`{"metadata":{"name":"orders"},"spec":{"resources":{"requests":{"memory":1e-99}}}}`,
		`{"metadata":{"name":"orders"},"spec":{"parameters":{"port":"1","ключ":"значение"},"username":"ユーザー"}}`,
		`{"metadata":null,"spec":null}`,
		`{"spec":{"replicas":"three","parameters":[],"engine":42}}`,
		`{"spec":{"storage":{"size":{"gi":1}}}}`,
		`[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]`,
		`null`,
		`{"metadata":{"name":"` + strings.Repeat("a", 300) + `"}}`,
		`{"spec":{"storage":{"size":"9e99"},"resources":{"limits":{"cpu":"-9e99"}}}}`,
		`{"metadata":{"name":"orders"},"spec":{"replicas":3,"synchronous":{"standbys":1},"parameters":{"synchronous_commit":"local","synchronous_standby_names":"*"}}}`,
		`{"metadata":{"name":"orders"},"spec":{"engine":"mysql","synchronous":{"standbys":-2147483648}}}`,
		`{"metadata":{"name":"orders"},"spec":{"replicas":2,"synchronous":{"standbys":"one"}}}`,
		`{"metadata":{"name":"orders"},"spec":{"synchronous":null,"replicas":9,"parameters":{"Synchronous_Commit":"'OFF'"}}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), []byte(`{"metadata":{"name":"orders"},"spec":{"engine":"postgres"}}`), uint8(0))
		f.Add([]byte(`{"metadata":{"name":"orders"},"spec":{"engine":"postgres"}}`), []byte(s), uint8(1))
	}
	scheme := runtime.NewScheme()
	if err := dbv1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	handlers := []admission.Handler{
		Guard(admission.WithDefaulter(scheme, admission.Defaulter[*dbv1.Database](&DatabaseDefaulter{Rules: testRules})).Handler),
		Guard(admission.WithValidator(scheme, admission.Validator[*dbv1.Database](&DatabaseValidator{Rules: testRules})).Handler),
	}
	ops := []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete}
	f.Fuzz(func(t *testing.T, object, oldObject []byte, op uint8) {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID:       "fuzz",
			Kind:      metav1.GroupVersionKind{Group: dbv1.GroupVersion.Group, Version: dbv1.GroupVersion.Version, Kind: dbv1.DatabaseKind},
			Resource:  metav1.GroupVersionResource{Group: dbv1.GroupVersion.Group, Version: dbv1.GroupVersion.Version, Resource: "databases"},
			Name:      "orders",
			Namespace: "shop",
			Operation: ops[int(op)%len(ops)],
		}}
		req.Object.Raw = object
		if req.Operation != admissionv1.Create {
			req.OldObject.Raw = oldObject
		}
		for _, h := range handlers {
			resp := h.Handle(context.Background(), req)
			if resp.Result != nil && resp.Result.Code >= http.StatusInternalServerError {
				t.Fatalf("%s: %d %s", req.Operation, resp.Result.Code, resp.Result.Message)
			}
			if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
				t.Fatalf("%s: refused without a message", req.Operation)
			}
		}
	})
}
