package v1alpha1

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestCheckQuantities(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want []string // field: detail fragment
	}{
		{name: "ordinary quantities pass", raw: `{"spec":{"storage":{"size":"10Gi"},"resources":{"requests":{"cpu":"500m","memory":1073741824},"limits":{"cpu":"1.5e3"}}}}`},
		{name: "exponents up to 99 pass", raw: `{"spec":{"storage":{"size":"1e99"},"resources":{"requests":{"cpu":"5e-99"}}}}`},
		{name: "the exa suffix is not an exponent", raw: `{"spec":{"storage":{"size":"1E"},"resources":{"limits":{"memory":"2Ei"}}}}`},
		{name: "a Database without quantities passes", raw: `{"metadata":{"name":"orders"},"spec":{"engine":"postgres"}}`},
		{name: "JSON of the wrong shape is left to the decoder", raw: `{"spec":"postgres"}`},
		{name: "malformed JSON is left to the decoder", raw: `{"spec":{"storage":{"size":"1e-999999999"`},
		{name: "a null quantity is unset", raw: `{"spec":{"storage":{"size":null},"resources":{"requests":{"cpu":null}}}}`},
		{
			name: "text that is not a quantity is refused with an example for the field",
			raw:  `{"spec":{"storage":{"size":"ten gigabytes"},"resources":{"requests":{"cpu":"lots","memory":"1 GB"},"limits":{"nvidia.com/gpu":"one"}}}}`,
			want: []string{
				"spec.resources.limits[nvidia.com/gpu]: must be a quantity such as 1, 500m or 10Gi",
				"spec.resources.requests[cpu]: must be a quantity such as 500m or 2",
				"spec.resources.requests[memory]: must be a quantity such as 512Mi or 2Gi",
				"spec.storage.size: must be a quantity such as 10Gi or 1Ti",
			},
		},
		{
			name: "a quantity neither a string nor a number is refused, naming its type",
			raw:  `{"spec":{"storage":{"size":{"gigabytes":10}},"resources":{"limits":{"memory":true}}}}`,
			want: []string{
				"spec.resources.limits[memory]: must be a quantity such as 512Mi or 2Gi, written as a string",
				"spec.storage.size: must be a quantity such as 10Gi or 1Ti, written as a string",
			},
		},
		{name: "parameters are not quantities", raw: `{"spec":{"parameters":{"max_wal_size":"1e-999999999"}}}`},
		{
			name: "a huge negative exponent is refused, as a string or a number",
			raw:  `{"spec":{"storage":{"size":"1e-999999999"},"resources":{"requests":{"memory":1e-999999999}}}}`,
			want: []string{"spec.resources.requests[memory]: exponent", "spec.storage.size: exponent"},
		},
		{
			name: "an exponent beyond int64 is refused",
			raw:  `{"spec":{"resources":{"limits":{"cpu":"1e-99999999999999999999999"}}}}`,
			want: []string{"spec.resources.limits[cpu]: exponent"},
		},
		{
			name: "a huge positive exponent is refused",
			raw:  `{"spec":{"storage":{"size":"9E+999999999"}}}`,
			want: []string{"spec.storage.size: exponent"},
		},
		{
			name: "a long run of digits is refused",
			raw:  `{"spec":{"storage":{"size":"0.` + strings.Repeat("0", 100000) + `1"}}}`,
			want: []string{"spec.storage.size: must be at most 64 characters"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range CheckQuantities([]byte(tt.raw)) {
				got = append(got, e.Field+": "+e.Detail)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("errors %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("error %q, want %q…", got[i], tt.want[i])
				}
			}
		})
	}
}

// TestQuantityFieldsAreComplete walks the Database type and checks that
// every quantity field is in quantityFields, so that a new one cannot
// bypass the guard.
func TestQuantityFieldsAreComplete(t *testing.T) {
	quantity := reflect.TypeFor[resource.Quantity]()
	resourceList := reflect.TypeFor[corev1.ResourceList]()
	var found []string
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		switch {
		case typ == quantity:
			found = append(found, path)
			return
		case typ == resourceList:
			found = append(found, path+".*")
			return
		case typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map:
			walk(typ.Elem(), path+".*")
			return
		case typ.Kind() != reflect.Struct:
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			child := path + "." + name
			if name == "" { // inlined
				child = path
			}
			walk(f.Type, strings.TrimPrefix(child, "."))
		}
	}
	walk(reflect.TypeFor[dbv1.DatabaseSpec](), "spec")
	slices.Sort(found)
	want := slices.Clone(quantityFields)
	slices.Sort(want)
	if !slices.Equal(found, want) {
		t.Errorf("quantity fields of DatabaseSpec %v, guarded %v", found, want)
	}
}

// TestDurationFieldsAreComplete walks the Database type and checks that
// every metav1.Duration field is in durationFields.
func TestDurationFieldsAreComplete(t *testing.T) {
	duration := reflect.TypeFor[metav1.Duration]()
	var found []string
	spec := reflect.TypeFor[dbv1.DatabaseSpec]()
	for i := range spec.NumField() {
		f := spec.Field(i)
		typ := f.Type
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case typ == duration:
			found = append(found, "spec."+name)
		case typ.Kind() == reflect.Struct && typ.PkgPath() == spec.PkgPath():
			for j := range typ.NumField() {
				if g := typ.Field(j); g.Type == duration || g.Type == reflect.PointerTo(duration) {
					t.Errorf("spec.%s has a duration field %s: extend durationFields and this test", name, g.Name)
				}
			}
		}
	}
	if !slices.Equal(found, durationFields) {
		t.Errorf("duration fields of DatabaseSpec %v, guarded %v", found, durationFields)
	}
}

// TestGuardAnswersAtOnce sends the request that would take minutes to
// decode, and one whose object is not JSON (which the decoder would read as
// YAML), through the real defaulting and validating handlers.
func TestGuardAnswersAtOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	handlers := map[string]admission.Handler{
		"defaulting": Guard(admission.WithDefaulter(scheme, admission.Defaulter[*dbv1.Database](&DatabaseDefaulter{Rules: testRules})).Handler),
		"validating": Guard(admission.WithValidator(scheme, admission.Validator[*dbv1.Database](&DatabaseValidator{Rules: testRules})).Handler),
	}
	bomb := []byte(`{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","metadata":{"name":"orders","namespace":"shop"},"spec":{"storage":{"size":"1e-999999999"}}}`)
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
				req := admissionRequest(t, op, nil, nil)
				req.Object.Raw = bomb
				if op == admissionv1.Update {
					req.Object = rawDatabase(t, valid())
					req.OldObject.Raw = bomb
				}
				began := time.Now()
				resp := h.Handle(context.Background(), req)
				if took := time.Since(began); took > time.Second {
					t.Errorf("%s: answered after %s", op, took)
				}
				if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity ||
					!strings.Contains(resp.Result.Message, "spec.storage.size") || !strings.Contains(resp.Result.Message, "exponent") {
					t.Errorf("%s: response %+v, want 422 naming spec.storage.size", op, resp.Result)
				}
			}
			// Field names in another case are not the fields (the API
			// server's decoder matches them case-sensitively), and must
			// not carry the bomb past the guard either way.
			for _, spelled := range []string{`"speC"`, `"Spec"`, `"spec":{"Storage"`, `"spec":{"storage":{"SIZE"`} {
				other := []byte(strings.Replace(string(bomb), strings.ToLower(spelled), spelled, 1))
				if string(other) == string(bomb) {
					t.Fatalf("%s: the bomb was not respelled", spelled)
				}
				for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
					req := admissionRequest(t, op, nil, nil)
					req.Object.Raw = other
					if op == admissionv1.Update {
						req.Object = rawDatabase(t, valid())
						req.OldObject.Raw = other
					}
					began := time.Now()
					h.Handle(context.Background(), req)
					if took := time.Since(began); took > time.Second {
						t.Errorf("%s with %s: answered after %s", op, spelled, took)
					}
				}
			}
			// An object that is not JSON is refused with a 400.
			req := admissionRequest(t, admissionv1.Update, valid(), nil)
			req.Object.Raw = []byte("#0")
			if resp := h.Handle(context.Background(), req); resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest {
				t.Errorf("an object that is not JSON: response %+v, want 400", resp.Result)
			}
			// Ordinary requests reach the handler.
			resp := h.Handle(context.Background(), admissionRequest(t, admissionv1.Create, nil, valid()))
			if !resp.Allowed {
				t.Errorf("a valid Database was refused: %+v", resp.Result)
			}
		})
	}
}

// TestGuardReportsQuantitiesWithTheOtherErrors sends Databases with
// malformed quantities and other problems through the guarded handlers:
// one Invalid answer names every problem in the order of the fields, and
// no rule reports the default that took a malformed quantity's place.
func TestGuardReportsQuantitiesWithTheOtherErrors(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	handlers := map[string]admission.Handler{
		"defaulting": Guard(admission.WithDefaulter(scheme, admission.Defaulter[*dbv1.Database](&DatabaseDefaulter{Rules: testRules})).Handler),
		"validating": Guard(admission.WithValidator(scheme, admission.Validator[*dbv1.Database](&DatabaseValidator{Rules: testRules})).Handler),
	}
	tests := []struct {
		name        string
		op          admissionv1.Operation
		old         *dbv1.Database
		object      string
		defaultOnly bool // the validating webhook sees the object defaulted; these tests send it as given
		want        string
	}{
		{
			name:   "a create with a malformed size, a malformed request and other errors",
			op:     admissionv1.Create,
			object: `{"metadata":{"name":"orders"},"spec":{"image":"postgres:latest","storage":{"size":"10 gigs"},"resources":{"requests":{"cpu":"lots"}},"port":80}}`,
			want: `Database.dbkeeper.io "orders" is invalid: [` +
				`spec.image: Invalid value: "postgres:latest": must not use the tag "latest", which moves: pods restarted at different times would run different versions; name a version, e.g. docker.io/library/postgres:17.6, ` +
				`spec.storage.size: Invalid value: "10 gigs": must be a quantity such as 10Gi or 1Ti, ` +
				`spec.resources.requests[cpu]: Invalid value: "lots": must be a quantity such as 500m or 2, ` +
				`spec.port: Invalid value: 80: must be between 1024 and 65535, inclusive]`,
			defaultOnly: true,
		},
		{
			name:   "a create with a malformed failover timeout and other errors",
			op:     admissionv1.Create,
			object: `{"metadata":{"name":"orders"},"spec":{"image":"postgres:latest","failoverTimeout":"soon","primary":"orders-1"}}`,
			want: `Database.dbkeeper.io "orders" is invalid: [` +
				`spec.image: Invalid value: "postgres:latest": must not use the tag "latest", which moves: pods restarted at different times would run different versions; name a version, e.g. docker.io/library/postgres:17.6, ` +
				`spec.primary: Invalid value: "orders-1": names no pod: spec.replicas is 1, so only orders-0, ` +
				`spec.failoverTimeout: Invalid value: "soon": must be a duration such as 30s or 2m]`,
			defaultOnly: true,
		},
		{
			name:   "a failover timeout written as a number",
			op:     admissionv1.Create,
			object: `{"metadata":{"name":"orders"},"spec":{"engine":"postgres","version":"17","image":"docker.io/library/postgres:17.6","replicas":1,"storage":{"size":"10Gi"},"databaseName":"app","username":"app","port":5432,"deletionPolicy":"Retain","failoverTimeout":30,"resources":{"requests":{"cpu":"100m","memory":"256Mi"}}}}`,
			want:   `Database.dbkeeper.io "orders" is invalid: spec.failoverTimeout: Invalid value: "30": must be a duration such as 30s or 2m, written as a string`,
		},
		{
			name:   "an update whose new size is malformed is not also reported as shrinking",
			op:     admissionv1.Update,
			old:    valid(fixture.WithStorageSize("10Gi")),
			object: `{"metadata":{"name":"orders"},"spec":{"engine":"postgres","version":"17","image":"docker.io/library/postgres:17.6","replicas":1,"storage":{"size":"10 gigs"},"databaseName":"app","username":"app","port":5432,"deletionPolicy":"Retain","failoverTimeout":"30s","resources":{"requests":{"cpu":"100m","memory":"256Mi"}}}}`,
			want:   `Database.dbkeeper.io "orders" is invalid: spec.storage.size: Invalid value: "10 gigs": must be a quantity such as 10Gi or 1Ti`,
		},
		{
			name:   "a create whose only problem is a malformed quantity",
			op:     admissionv1.Create,
			object: `{"metadata":{"name":"orders"},"spec":{"engine":"postgres","version":"17","image":"docker.io/library/postgres:17.6","replicas":1,"storage":{"size":"10Gi"},"databaseName":"app","username":"app","port":5432,"deletionPolicy":"Retain","failoverTimeout":"30s","resources":{"limits":{"memory":"2 GB"}}}}`,
			want:   `Database.dbkeeper.io "orders" is invalid: spec.resources.limits[memory]: Invalid value: "2 GB": must be a quantity such as 512Mi or 2Gi`,
		},
	}
	for _, tt := range tests {
		for name, h := range handlers {
			if tt.defaultOnly && name == "validating" {
				continue
			}
			t.Run(tt.name+", "+name, func(t *testing.T) {
				req := admissionRequest(t, tt.op, tt.old, nil)
				req.Object.Raw = []byte(tt.object)
				resp := h.Handle(context.Background(), req)
				if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity {
					t.Fatalf("response %+v, want 422", resp.Result)
				}
				if resp.Result.Message != tt.want {
					t.Errorf("message:\n got  %s\n want %s", resp.Result.Message, tt.want)
				}
				if len(resp.Patches) != 0 {
					t.Errorf("a refused request carries patches %+v", resp.Patches)
				}
			})
		}
	}
}
