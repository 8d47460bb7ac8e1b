package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
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
	"spec.maxLagOnFailover",
	"spec.resources.limits.*",
	"spec.resources.requests.*",
}

// durationFields are the JSON paths of every duration (metav1.Duration) in
// a Database. A duration that is not Go duration text would fail the
// decoding of the whole Database with an error that names no field, so
// stripQuantities takes it out and reports it like a malformed quantity.
// TestDurationFieldsAreComplete checks the list against the Go types.
var durationFields = []string{
	"spec.failoverTimeout",
}

// CheckQuantities returns an error for every quantity in a Database's JSON
// encoding that cannot be decoded, or not safely: text that is not a
// quantity, a value that is neither a string nor a number, or text too long
// or with an exponent too large to parse safely (see MaxQuantityLength).
// Each error is an Invalid on the field's path with an example of a valid
// value. Durations that do not decode (see durationFields) are reported the
// same way. It decodes nothing into a Database, and returns no error for
// JSON it cannot read: the decoder reports that.
func CheckQuantities(raw []byte) field.ErrorList {
	_, errs := stripQuantities(raw)
	return errs
}

// stripQuantities returns the errors of CheckQuantities, and raw with the
// quantities in error removed, so that the rest of the Database decodes and
// can be validated: nil when there is no error.
func stripQuantities(raw []byte) ([]byte, field.ErrorList) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj any
	if err := dec.Decode(&obj); err != nil {
		return nil, nil
	}
	var errs field.ErrorList
	for _, pattern := range quantityFields {
		walkPath(obj, strings.Split(pattern, "."), nil, func(path *field.Path, parent map[string]any, key string) {
			if err := quantityError(path, parent[key]); err != nil {
				errs = append(errs, err)
				delete(parent, key)
			}
		})
	}
	for _, pattern := range durationFields {
		walkPath(obj, strings.Split(pattern, "."), nil, func(path *field.Path, parent map[string]any, key string) {
			if err := durationError(path, parent[key]); err != nil {
				errs = append(errs, err)
				delete(parent, key)
			}
		})
	}
	if len(errs) == 0 {
		return nil, nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	stripped, err := json.Marshal(obj)
	if err != nil {
		// What was decoded encodes again; keep the errors all the same.
		return nil, errs
	}
	return stripped, errs
}

// quantityError returns the error of a quantity's JSON value, nil when it
// decodes safely or is null (unset).
func quantityError(path *field.Path, v any) *field.Error {
	example := quantityExample(path)
	switch v := v.(type) {
	case nil:
		return nil
	case string, json.Number:
		text, _ := quantityText(v)
		if detail := unsafeQuantity(text); detail != "" {
			return field.Invalid(path, shorten(text), detail)
		}
		if _, err := resource.ParseQuantity(strings.TrimSpace(text)); err != nil { // as Quantity.UnmarshalJSON
			return field.Invalid(path, text, "must be a quantity such as "+example)
		}
		return nil
	default:
		return field.Invalid(path, jsonType(v), "must be a quantity such as "+example+", written as a string")
	}
}

// durationError returns the error of a duration's JSON value, nil when it
// decodes (as metav1.Duration.UnmarshalJSON) or is null (unset).
func durationError(path *field.Path, v any) *field.Error {
	const detail = "must be a duration such as 30s or 2m"
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		if _, err := time.ParseDuration(v); err != nil {
			return field.Invalid(path, shorten(v), detail)
		}
		return nil
	case json.Number:
		return field.Invalid(path, v.String(), detail+", written as a string")
	default:
		return field.Invalid(path, jsonType(v), detail+", written as a string")
	}
}

// quantityExample returns valid values of the quantity at path, for error
// messages.
func quantityExample(path *field.Path) string {
	switch p := path.String(); {
	case p == "spec.storage.size":
		return "10Gi or 1Ti"
	case p == "spec.maxLagOnFailover":
		return "16Mi or 1Gi"
	case strings.HasSuffix(p, "[cpu]"):
		return "500m or 2"
	case strings.HasSuffix(p, "[memory]"):
		return "512Mi or 2Gi"
	}
	return "1, 500m or 10Gi"
}

// jsonType names the JSON type of a decoded value as the API server's
// schema errors do.
func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "boolean"
	}
	return fmt.Sprintf("%T", v)
}

// walkPath calls f for each value of obj at the path parts (map keys; "*"
// is every key), with its field path, the map holding it and its key there.
func walkPath(obj any, parts []string, path *field.Path, f func(path *field.Path, parent map[string]any, key string)) {
	m, ok := obj.(map[string]any)
	if !ok || len(parts) == 0 {
		return
	}
	child := func(key string) *field.Path {
		switch {
		case parts[0] == "*":
			return path.Key(key)
		case path == nil:
			return field.NewPath(key)
		}
		return path.Child(key)
	}
	keys := []string{parts[0]}
	if parts[0] == "*" {
		keys = make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	for _, k := range keys {
		v, ok := m[k]
		switch {
		case !ok:
		case len(parts) == 1:
			f(child(k), m, k)
		default:
			walkPath(v, parts[1:], child(k), f)
		}
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
