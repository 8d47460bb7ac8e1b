package rules

import (
	"cmp"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Quantities are documented to lie within ±(2^63-1) with at most nano
// precision, but a decimal exponent can write far larger numbers
// ("9e999999999"), which the JSON decoder accepts and on which
// resource.Quantity's arithmetic (Cmp, and so apiequality.Semantic) takes
// practically forever. Validation therefore never does exact arithmetic on a
// quantity outside the documented range, and refuses such quantities.

// maxZeroExponent is the largest decimal exponent, either way, of a zero
// quantity in range.
const maxZeroExponent = 18

// quantityInRange reports whether q is zero with an exponent within
// ±maxZeroExponent, or its magnitude lies between
// 1n and 2^63-1, the range within which exact comparisons are cheap.
func quantityInRange(q resource.Quantity) bool {
	if q.Sign() == 0 {
		// A zero may carry any exponent ("0e999999999"), and Cmp rescales
		// the other side to it. q is a copy: AsDec caches in it alone.
		exponent := -int64(q.AsDec().Scale())
		return exponent >= -maxZeroExponent && exponent <= maxZeroExponent
	}
	f := math.Abs(q.AsApproximateFloat64())
	return f >= 1e-9*(1-1e-6) && f <= math.MaxInt64
}

// compareQuantities is resource.Quantity.Cmp, made safe for quantities out
// of range: those compare by their approximate values (±Inf when huge).
func compareQuantities(a, b resource.Quantity) int {
	if a.Sign() == 0 || b.Sign() == 0 {
		// A zero may carry any exponent ("0e999999999"), which Cmp would
		// rescale the other side to at great cost; the signs say all.
		return cmp.Compare(a.Sign(), b.Sign())
	}
	if quantityInRange(a) && quantityInRange(b) {
		return a.Cmp(b)
	}
	return cmp.Compare(approximate(a), approximate(b))
}

// approximate returns q as a float64, keeping the sign of values too small
// for a float64.
func approximate(q resource.Quantity) float64 {
	f := q.AsApproximateFloat64()
	if f == 0 && q.Sign() != 0 {
		return float64(q.Sign()) * math.SmallestNonzeroFloat64
	}
	return f
}

// specEquality compares specs as apiequality.Semantic does (nil and empty
// maps are equal, quantities by value), with quantities compared safely.
var specEquality = conversion.EqualitiesOrDie(func(a, b resource.Quantity) bool {
	return compareQuantities(a, b) == 0
})

// quantityString formats a quantity within range. It takes a copy, so that
// the string is not cached in the caller's value: validation never modifies
// its input.
func quantityString(q resource.Quantity) string {
	if !quantityInRange(q) {
		return "<out of range>"
	}
	return q.String()
}

// quantityValue is the value of a quantity in a field.Error: its string, or
// nothing when it is out of range.
func quantityValue(q resource.Quantity) any {
	if !quantityInRange(q) {
		return field.OmitValueType{}
	}
	return q.String()
}

// outOfRangeDetail is the error detail of a quantity out of range.
const outOfRangeDetail = "is out of range: quantities may not exceed 2^63-1 in magnitude"
