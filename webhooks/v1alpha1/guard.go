package v1alpha1

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// Bounds of the text of a quantity in an admission request, checked before
// the request is decoded.
//
// resource.ParseQuantity rounds a value below 1n (nano) by computing ten to
// the power of its scale, so "1e-999999999" keeps a CPU busy for minutes and
// takes hundreds of megabytes, and a long run of zeros after the decimal
// point does the same more slowly. The admission webhooks decode the
// Database, and so parse every quantity, before any rule runs: one such
// request would tie up the webhook server and make the API server answer
// 500 (the webhook timed out). No quantity of a Database needs either: the
// largest, a storage size of 64Ti, is below 1e14.
const (
	// MaxQuantityLength is the longest text of a quantity.
	MaxQuantityLength = 64
	// MaxQuantityExponent is the largest magnitude of a quantity's decimal
	// exponent (the 6 of 1e6, the -9 of 5e-9).
	MaxQuantityExponent = 99
)

// quantityFields are the JSON paths of every quantity in a Database, where
// "*" stands for any key of a map. TestQuantityFieldsAreComplete checks the
// list against the Go types.
var quantityFields = []string{
	"spec.storage.size",
	"spec.resources.limits.*",
	"spec.resources.requests.*",
}

// CheckQuantities returns an error for every quantity in a Database's JSON
// encoding whose text is too long or whose exponent is too large to parse
// safely (see MaxQuantityLength). It decodes nothing into a Database, and
// returns no error for JSON it cannot read: the decoder reports that.
func CheckQuantities(raw []byte) field.ErrorList {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj any
	if err := dec.Decode(&obj); err != nil {
		return nil
	}
	var errs field.ErrorList
	for _, pattern := range quantityFields {
		walkPath(obj, strings.Split(pattern, "."), nil, func(path *field.Path, v any) {
			text, ok := quantityText(v)
			if !ok {
				return
			}
			if detail := unsafeQuantity(text); detail != "" {
				errs = append(errs, field.Invalid(path, shorten(text), detail))
			}
		})
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	return errs
}

// walkPath calls f for each value of obj at the path parts (map keys; "*"
// is every key), with its field path.
func walkPath(obj any, parts []string, path *field.Path, f func(*field.Path, any)) {
	if len(parts) == 0 {
		f(path, obj)
		return
	}
	m, ok := obj.(map[string]any)
	if !ok {
		return
	}
	if parts[0] != "*" {
		if v, ok := m[parts[0]]; ok {
			next := field.NewPath(parts[0])
			if path != nil {
				next = path.Child(parts[0])
			}
			walkPath(v, parts[1:], next, f)
		}
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		walkPath(m[k], parts[1:], path.Key(k), f)
	}
}

// quantityText returns the text of a quantity given as a JSON string or
// number.
func quantityText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	}
	return "", false
}

// unsafeQuantity returns why a quantity's text must not be parsed, or "".
func unsafeQuantity(text string) string {
	if len(text) > MaxQuantityLength {
		return fmt.Sprintf("must be at most %d characters long", MaxQuantityLength)
	}
	i := strings.IndexAny(text, "eE")
	if i < 0 || i == len(text)-1 {
		return "" // no exponent ("E" alone is the exa suffix)
	}
	exp, err := strconv.ParseInt(text[i+1:], 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return "" // not a quantity: the decoder says so
	}
	if err != nil || exp > MaxQuantityExponent || exp < -MaxQuantityExponent {
		return fmt.Sprintf("exponent must lie between -%d and %d", MaxQuantityExponent, MaxQuantityExponent)
	}
	return ""
}

// shorten keeps a long value readable in an error message.
func shorten(s string) string {
	const keep = 32
	if len(s) <= keep {
		return s
	}
	return fmt.Sprintf("%s... (%d characters)", s[:keep], len(s))
}

// Guard returns a handler that answers, before next decodes anything, an
// admission request whose object or stored object is not JSON with a 400
// (the API server always sends JSON; the decoder would take other input
// for YAML, and the defaulting webhook would then fail to build its patch
// with a 500), and one holding a quantity CheckQuantities refuses with an
// Invalid error naming each field. It passes every other request to next.
func Guard(next admission.Handler) admission.Handler {
	return guard{next: next}
}

type guard struct {
	next admission.Handler
}

// Handle implements admission.Handler.
func (g guard) Handle(ctx context.Context, req admission.Request) admission.Response {
	raws := map[string][]byte{"object": req.Object.Raw}
	if req.Operation != admissionv1.Create {
		// The stored object was admitted, unless the webhooks were
		// bypassed; it is decoded all the same.
		raws["oldObject"] = req.OldObject.Raw
	}
	var errs field.ErrorList
	for _, name := range []string{"object", "oldObject"} {
		raw := raws[name]
		if len(raw) > 0 && !json.Valid(raw) {
			resp := admission.Errored(http.StatusBadRequest, fmt.Errorf("the request's %s is not JSON", name))
			resp.UID = req.UID
			return resp
		}
		errs = append(errs, CheckQuantities(raw)...)
	}
	if len(errs) == 0 {
		return g.next.Handle(ctx, req)
	}
	status := apierrors.NewInvalid(schema.GroupKind{Group: dbv1.GroupVersion.Group, Kind: dbv1.DatabaseKind}, req.Name, errs).Status()
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &status}}
}
