package v1alpha1

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// Guard returns a handler that answers, before next decodes anything, an
// admission request whose object or stored object is not JSON with a 400
// (the API server always sends JSON; the decoder would take other input
// for YAML, and the defaulting webhook would then fail to build its patch
// with a 500), and one whose stored object holds a quantity CheckQuantities
// refuses with an Invalid error naming each field.
//
// Quantities (and durations) of the object that CheckQuantities refuses
// are taken out of it before next decodes it, and their errors put in the
// context, where the webhooks' Default and Validate methods add them to the
// errors of the rest of the object: one answer names every problem. A request with such
// a quantity is always refused: if next allowed it, Guard refuses it with
// the quantity errors alone.
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
	for _, name := range []string{"object", "oldObject"} {
		if raw := raws[name]; len(raw) > 0 && !json.Valid(raw) {
			resp := admission.Errored(http.StatusBadRequest, fmt.Errorf("the request's %s is not JSON", name))
			resp.UID = req.UID
			return resp
		}
	}
	stripped, errs := stripQuantities(req.Object.Raw)
	if oldErrs := CheckQuantities(raws["oldObject"]); len(oldErrs) > 0 {
		return refuse(req, append(errs, oldErrs...))
	}
	if len(errs) == 0 {
		return g.next.Handle(ctx, req)
	}
	if stripped == nil {
		return refuse(req, errs)
	}
	req.Object = runtime.RawExtension{Raw: stripped}
	resp := g.next.Handle(context.WithValue(ctx, decodeErrorsKey{}, errs), req)
	if resp.Allowed {
		// The response, a patch to the stripped object among others, must
		// not reach the API server.
		return refuse(req, errs)
	}
	return resp
}

// refuse returns the Invalid answer of errs to req.
func refuse(req admission.Request, errs field.ErrorList) admission.Response {
	status := apierrors.NewInvalid(schema.GroupKind{Group: dbv1.GroupVersion.Group, Kind: dbv1.DatabaseKind}, req.Name, errs).Status()
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &status}}
}

// decodeErrorsKey is the context key of the errors of the quantities Guard
// took out of the object.
type decodeErrorsKey struct{}

// withDecodeErrors returns errs, the validation errors of the object of
// the request of ctx, together with the errors of the quantities Guard took
// out of it, in the order of the fields. An error of errs on the path of
// such a quantity is dropped: it is about the default that took its place.
func withDecodeErrors(ctx context.Context, errs field.ErrorList) field.ErrorList {
	decodeErrs, _ := ctx.Value(decodeErrorsKey{}).(field.ErrorList)
	if len(decodeErrs) == 0 {
		return errs
	}
	merged := slices.Clone(decodeErrs)
	for _, e := range errs {
		if !slices.ContainsFunc(decodeErrs, func(d *field.Error) bool { return d.Field == e.Field }) {
			merged = append(merged, e)
		}
	}
	slices.SortStableFunc(merged, func(a, b *field.Error) int { return cmp.Compare(rules.FieldRank(a.Field), rules.FieldRank(b.Field)) })
	return merged
}
