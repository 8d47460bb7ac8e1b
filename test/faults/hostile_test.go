package faults

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	webhooks "github.com/dbkeeper/dbkeeper/webhooks/v1alpha1"
)

// webhookClient sends raw AdmissionReviews to the manager's webhook server
// over TLS, trusting the CA of the installed webhook configuration.
type webhookClient struct {
	http *http.Client
	base string
}

func (h *harness) webhookClient(t *testing.T) *webhookClient {
	t.Helper()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := h.Client.Get(context.Background(), client.ObjectKey{Name: localrun.MutatingWebhookName}, cfg); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("the webhook configuration has no CA bundle")
	}
	return &webhookClient{
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 256,
		}},
		base: fmt.Sprintf("https://127.0.0.1:%d", h.WebhookPort),
	}
}

// answer is what the webhook server said to one request.
type answer struct {
	httpStatus int
	review     admissionv1.AdmissionReview
	decodeErr  error
	took       time.Duration
}

// code returns the answer's result code: 200 when allowed without one.
func (a answer) code() int32 {
	if r := a.review.Response; r != nil && r.Result != nil && r.Result.Code != 0 {
		return r.Result.Code
	}
	return http.StatusOK
}

func (a answer) message() string {
	if r := a.review.Response; r != nil && r.Result != nil {
		return r.Result.Message
	}
	return ""
}

func (a answer) allowed() bool { return a.review.Response != nil && a.review.Response.Allowed }

func (w *webhookClient) post(path, contentType string, body []byte) (answer, error) {
	began := time.Now()
	resp, err := w.http.Post(w.base+path, contentType, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{httpStatus: resp.StatusCode, took: time.Since(began)}
	a.decodeErr = json.Unmarshal(data, &a.review)
	return a, nil
}

// review returns an AdmissionReview of a Database request whose object and
// old object are the raw JSON given ("" leaves one out).
func review(op, object, oldObject string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"0b5e0b6e-hostile","kind":{"group":"dbkeeper.io","version":"v1alpha1","kind":"Database"},"resource":{"group":"dbkeeper.io","version":"v1alpha1","resource":"databases"},"name":"hostile","namespace":"hostile","operation":%q,"userInfo":{"username":"mallory"}`, op)
	if object != "" {
		b.WriteString(`,"object":` + object)
	}
	if oldObject != "" {
		b.WriteString(`,"oldObject":` + oldObject)
	}
	b.WriteString("}}")
	return []byte(b.String())
}

// dbJSON returns a Database's JSON with spec as given.
func dbJSON(name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","metadata":{"name":%q,"namespace":"hostile"},"spec":%s}`, name, spec)
}

// hostileCase is one malformed or hostile admission request.
type hostileCase struct {
	name string
	path string // webhooks.MutatePath or webhooks.ValidatePath
	body []byte
	// contentType defaults to application/json.
	contentType string
	// wantCode is the result code expected; wantMessage parts of the
	// message.
	wantCode    int32
	wantMessage []string
}

func hostileCases() []hostileCase {
	params := make([]string, 0, 10000)
	for i := range 10000 {
		params = append(params, fmt.Sprintf(`"key_%05d":"value"`, i))
	}
	hugeParams := `{"engine":"postgres","parameters":{` + strings.Join(params, ",") + `}}`
	longName := strings.Repeat("a", 10000)
	unicodeSpec := `{"engine":"postgres","username":"ユーザー","databaseName":"δεδομένα","parameters":{"ключ":"значение","emoji🔥":"✓"}}`
	depthBomb := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	const valid = `{"engine":"postgres","version":"17","image":"docker.io/library/postgres:17.6","replicas":1,"storage":{"size":"1Gi"},"resources":{"requests":{"cpu":"100m","memory":"256Mi"}},"databaseName":"app","username":"app","port":5432,"deletionPolicy":"Retain"}`

	m, v := webhooks.MutatePath, webhooks.ValidatePath
	cases := []hostileCase{
		{name: "a huge parameter map", path: v, body: review("CREATE", dbJSON("hostile", hugeParams), ""), wantCode: 422, wantMessage: []string{"spec.parameters: Too many: 10000: must have at most 64 items"}},
		{name: "a huge parameter map, defaulted", path: m, body: review("CREATE", dbJSON("hostile", hugeParams), ""), wantCode: 422, wantMessage: []string{"spec.parameters: Too many: 10000: must have at most 64 items"}},
		{name: "a 10000-character name", path: v, body: review("CREATE", dbJSON(longName, valid), ""), wantCode: 422, wantMessage: []string{"metadata.name: Too long"}},
		{name: "unicode names and parameters", path: v, body: review("CREATE", dbJSON("数据库-🚀", unicodeSpec), ""), wantCode: 422,
			wantMessage: []string{"metadata.name", "spec.username", "spec.databaseName", "spec.parameters[ключ]"}},
		{name: "a null spec is validated as empty", path: v, body: review("CREATE", dbJSON("hostile", "null"), ""), wantCode: 422, wantMessage: []string{"spec."}},
		{name: "a null spec is defaulted", path: m, body: review("CREATE", dbJSON("hostile", "null"), ""), wantCode: 200},
		{name: "null fields inside the spec", path: v, body: review("CREATE", dbJSON("hostile", `{"engine":null,"replicas":null,"storage":null,"resources":null,"parameters":{"a":null},"port":null}`), ""), wantCode: 422},
		{name: "a null metadata", path: v, body: review("CREATE", `{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","metadata":null,"spec":`+valid+`}`, ""), wantCode: 422, wantMessage: []string{"metadata.name"}},
		{name: "a null object", path: v, body: review("CREATE", "null", ""), wantCode: 400},
		{name: "a null object, defaulted", path: m, body: review("CREATE", "null", ""), wantCode: 400},
		{name: "replicas as a string", path: v, body: review("CREATE", dbJSON("hostile", `{"replicas":"three"}`), ""), wantCode: 400, wantMessage: []string{"replicas"}},
		{name: "replicas as a string, defaulted", path: m, body: review("CREATE", dbJSON("hostile", `{"replicas":"three"}`), ""), wantCode: 400, wantMessage: []string{"replicas"}},
		{name: "parameters as a list", path: v, body: review("CREATE", dbJSON("hostile", `{"parameters":["a","b"]}`), ""), wantCode: 400, wantMessage: []string{"parameters"}},
		{name: "the spec as a string", path: m, body: review("CREATE", dbJSON("hostile", `"postgres"`), ""), wantCode: 400},
		{name: "the engine as a number", path: v, body: review("CREATE", dbJSON("hostile", `{"engine":42}`), ""), wantCode: 400, wantMessage: []string{"engine"}},
		{name: "the name as a number", path: v, body: review("CREATE", `{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","metadata":{"name":123}}`, ""), wantCode: 400},
		{name: "a storage size as an object", path: m, body: review("CREATE", dbJSON("hostile", `{"storage":{"size":{"gigabytes":10}}}`), ""), wantCode: 422, wantMessage: []string{`spec.storage.size: Invalid value: "object": must be a quantity such as 10Gi or 1Ti, written as a string`}},
		{name: "a storage size that takes minutes to parse", path: m, body: review("CREATE", dbJSON("hostile", `{"storage":{"size":"1e-999999999"}}`), ""), wantCode: 422, wantMessage: []string{"spec.storage.size", "exponent"}},
		{name: "a memory request that takes minutes to parse", path: v, body: review("CREATE", dbJSON("hostile", `{"resources":{"requests":{"memory":1e-999999999}}}`), ""), wantCode: 422, wantMessage: []string{"spec.resources.requests[memory]"}},
		{name: "an update whose stored object takes minutes to parse", path: v, body: review("UPDATE", dbJSON("hostile", valid), dbJSON("hostile", `{"storage":{"size":"1e-999999999"}}`)), wantCode: 422, wantMessage: []string{"spec.storage.size"}},
		{name: "an update with a malformed stored object", path: m, body: review("UPDATE", dbJSON("hostile", valid), `{"spec":{"replicas":"three"}}`), wantCode: 400},
		{name: "an update with a malformed stored object, validated", path: v, body: review("UPDATE", dbJSON("hostile", valid), `{"spec":{"replicas":"three"}}`), wantCode: 400},
		{name: "a delete without the stored object", path: v, body: review("DELETE", "", ""), wantCode: 400},
		{name: "an unknown operation", path: v, body: review("EXPLODE", dbJSON("hostile", valid), ""), wantCode: 400, wantMessage: []string{"EXPLODE"}},
		{name: "a review without a request", path: v, body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), wantCode: 400},
		{name: "a truncated review", path: m, body: review("CREATE", dbJSON("hostile", valid), "")[:200], wantCode: 400},
		{name: "an empty body", path: v, body: nil, wantCode: 400, wantMessage: []string{"empty"}},
		{name: "another content type", path: v, body: review("CREATE", dbJSON("hostile", valid), ""), contentType: "text/plain", wantCode: 400, wantMessage: []string{"contentType"}},
		{name: "100000 nested arrays in a parameter", path: m, body: review("CREATE", dbJSON("hostile", `{"parameters":{"a":`+depthBomb+`}}`), ""), wantCode: 400},
		{name: "100000 nested arrays as the object", path: v, body: review("CREATE", depthBomb, ""), wantCode: 400},
		{name: "a body over 7 MiB", path: v, body: review("CREATE", dbJSON("hostile", `{"image":"`+strings.Repeat("x", 8<<20)+`"}`), ""), wantCode: 413},
	}
	return cases
}

// TestHostileAdmission sends malformed, oversized and hostile
// AdmissionReviews straight to the webhook server over TLS, then hostile
// Databases through the API server, then 200 admission requests at once.
// Every request is answered with a clear 4xx error (or allowed, where the
// input is legal), never a 500 or a panic, and the server stays up.
func TestHostileAdmission(t *testing.T) {
	h := env(t)
	const ns = "hostile"
	h.createNamespace(t, ns)
	m := h.startManager(t, "hostile")
	w := h.webhookClient(t)

	t.Run("raw AdmissionReviews get a clear 4xx answer, never a 500", func(t *testing.T) {
		for _, c := range hostileCases() {
			ct := c.contentType
			if ct == "" {
				ct = "application/json"
			}
			a, err := w.post(c.path, ct, c.body)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			if a.httpStatus != http.StatusOK || a.decodeErr != nil || a.review.Response == nil {
				t.Errorf("%s: HTTP %d, response decodes: %v", c.name, a.httpStatus, a.decodeErr)
				continue
			}
			code, msg := a.code(), a.message()
			switch {
			case code >= 500:
				t.Errorf("%s: %d %s", c.name, code, msg)
			case code != c.wantCode:
				t.Errorf("%s: code %d (allowed %v), want %d: %s", c.name, code, a.allowed(), c.wantCode, msg)
			case code != http.StatusOK && (a.allowed() || msg == ""):
				t.Errorf("%s: code %d but allowed %v, message %q", c.name, code, a.allowed(), msg)
			case code == http.StatusOK && !a.allowed():
				t.Errorf("%s: refused without a code", c.name)
			}
			for _, want := range c.wantMessage {
				if !strings.Contains(msg, want) {
					t.Errorf("%s: the message does not say %q: %s", c.name, want, msg)
				}
			}
			// The machine may be loaded: this only catches a request that
			// hangs (the quantity bomb took minutes before the guard).
			if a.took > 10*time.Second {
				t.Errorf("%s: answered after %s", c.name, a.took)
			}
			t.Logf("%-55s %s %d %s", c.name, c.path[:9], code, shortMessage(msg))
		}
	})

	t.Run("hostile Databases through the API server are refused with a 4xx", func(t *testing.T) {
		rc := h.restClient(t)
		longName := strings.Repeat("a", 300)
		params := make([]string, 0, 10000)
		for i := range 10000 {
			params = append(params, fmt.Sprintf(`"key_%05d":"value"`, i))
		}
		cases := []struct {
			name, body string
			want       func(error) bool
		}{
			// The mutating webhook sees the object before the schema does.
			{"replicas as a string", dbJSON("wrong-type", `{"replicas":"three"}`), apierrors.IsBadRequest},
			{"a storage size that takes minutes to parse", dbJSON("bomb", `{"storage":{"size":"1e-999999999"}}`), apierrors.IsInvalid},
			{"a huge parameter map", dbJSON("params", `{"parameters":{`+strings.Join(params, ",")+`}}`), apierrors.IsInvalid},
			{"a 300-character name", dbJSON(longName, `{}`), apierrors.IsInvalid},
			{"a unicode name", dbJSON("数据库-🚀", `{}`), apierrors.IsInvalid},
			{"the name as a number", `{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","metadata":{"name":123},"spec":{}}`, apierrors.IsBadRequest},
			{"malformed JSON", `{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","metadata":{"name":"x"`, apierrors.IsBadRequest},
		}
		for _, c := range cases {
			began := time.Now()
			err := rc.Post().AbsPath("/apis/dbkeeper.io/v1alpha1/namespaces", ns, "databases").
				SetHeader("Content-Type", "application/json").Body([]byte(c.body)).Do(context.Background()).Error()
			took := time.Since(began)
			status := int32(0)
			if s, ok := err.(apierrors.APIStatus); ok {
				status = s.Status().Code
			}
			switch {
			case err == nil:
				t.Errorf("%s: stored", c.name)
			case status >= 500 || !c.want(err):
				// A webhook that hangs shows here: the API server gives up
				// after the webhook's 5 s timeout and answers 500.
				t.Errorf("%s: %d %v", c.name, status, err)
			}
			t.Logf("%-45s %d in %4dms: %s", c.name, status, took.Milliseconds(), shortMessage(fmt.Sprint(err)))
		}
		// Nulls mean "unset": a null spec is defaulted, a null parameter
		// dropped.
		for name, spec := range map[string]string{"null-spec": "null", "null-param": `{"parameters":{"a":null,"work_mem":"8MB"}}`} {
			err := rc.Post().AbsPath("/apis/dbkeeper.io/v1alpha1/namespaces", ns, "databases").
				SetHeader("Content-Type", "application/json").Body([]byte(dbJSON(name, spec))).Do(context.Background()).Error()
			if err != nil {
				t.Errorf("%s: refused: %v", name, err)
				continue
			}
			db := &dbv1.Database{}
			if err := h.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, db); err != nil || db.Spec.Engine != dbv1.EnginePostgres {
				t.Errorf("%s: not defaulted: %v %+v", name, err, db.Spec)
			}
			if _, ok := db.Spec.Parameters["a"]; ok {
				t.Errorf("%s: the null parameter was stored: %v", name, db.Spec.Parameters)
			}
			t.Logf("%-45s stored as spec %+v", name, db.Spec.Parameters)
		}
	})

	t.Run("200 concurrent admission requests are all answered", func(t *testing.T) {
		const n = 200
		valid := dbJSON("load", `{"engine":"mysql"}`)
		invalid := dbJSON("load", `{"engine":"postgres","version":"12","image":"postgres:latest"}`)
		type result struct {
			a   answer
			err error
			ok  bool
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		began := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var a answer
				var err error
				ok := false
				switch i % 4 {
				case 0, 1:
					a, err = w.post(webhooks.MutatePath, "application/json", review("CREATE", valid, ""))
					ok = err == nil && a.allowed() && len(a.review.Response.Patch) > 0
				case 2:
					a, err = w.post(webhooks.ValidatePath, "application/json", review("CREATE", invalid, ""))
					ok = err == nil && !a.allowed() && a.code() == http.StatusUnprocessableEntity
				case 3:
					a, err = w.post(webhooks.ValidatePath, "application/json", review("CREATE", dbJSON("hostile", hugeParamsSpec()), ""))
					ok = err == nil && !a.allowed() && a.code() == http.StatusUnprocessableEntity
				}
				results[i] = result{a, err, ok}
			}()
		}
		close(start)
		wg.Wait()
		wall := time.Since(began)
		took := make([]time.Duration, 0, len(results))
		failed := 0
		for i, r := range results {
			if !r.ok {
				failed++
				if failed <= 5 {
					t.Errorf("request %d: %v, HTTP %d, code %d: %s", i, r.err, r.a.httpStatus, r.a.code(), shortMessage(r.a.message()))
				}
			}
			took = append(took, r.a.took)
		}
		slices.Sort(took)
		t.Logf("FIGURES 200 concurrent admission requests: %d answered correctly in %s; latency p50 %s, p99 %s, max %s",
			n-failed, wall.Round(time.Millisecond), took[n/2].Round(time.Millisecond), took[n*99/100].Round(time.Millisecond), took[n-1].Round(time.Millisecond))
	})

	t.Run("the webhook server is still up and the manager never panicked", func(t *testing.T) {
		select {
		case <-m.Done():
			t.Fatal("the manager exited")
		default:
		}
		a, err := w.post(webhooks.ValidatePath, "application/json", review("CREATE", dbJSON("after", `{"engine":"postgres","version":"12"}`), ""))
		if err != nil || a.code() != http.StatusUnprocessableEntity {
			t.Errorf("after the storm: %v, code %d", err, a.code())
		}
		data, err := os.ReadFile(m.LogFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"panic", "Observed a panic", "goroutine "} {
			if bytes.Contains(data, []byte(bad)) {
				t.Errorf("the manager log contains %q", bad)
			}
		}
	})
	h.deleteNamespace(t, ns)
}

func hugeParamsSpec() string {
	params := make([]string, 0, 1000)
	for i := range 1000 {
		params = append(params, fmt.Sprintf(`"key_%04d":"value"`, i))
	}
	return `{"engine":"postgres","parameters":{` + strings.Join(params, ",") + `}}`
}

func shortMessage(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}

// restClient returns a REST client for raw requests to the API server.
func (h *harness) restClient(t *testing.T) *rest.RESTClient {
	t.Helper()
	cfg := rest.CopyConfig(h.Cluster.Config)
	cfg.GroupVersion = &schema.GroupVersion{Group: dbv1.GroupVersion.Group, Version: dbv1.GroupVersion.Version}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}
