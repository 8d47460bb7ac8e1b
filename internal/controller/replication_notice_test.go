package controller

import (
	"slices"
	"testing"
)

func TestFreshReportsEachOccurrenceOnce(t *testing.T) {
	type item struct{ name, value string }
	id := func(i item) (string, string) { return i.name, i.value }
	var current map[string]string
	steps := []struct {
		now  []item
		want []item
	}{
		{now: []item{{"a", "1"}, {"b", ""}}, want: []item{{"a", "1"}, {"b", ""}}},
		{now: []item{{"a", "1"}, {"b", ""}}, want: nil},                // still the case: said already
		{now: []item{{"a", "2"}, {"b", ""}}, want: []item{{"a", "2"}}}, // another value
		{now: []item{{"a", "2"}}, want: nil},                           // b went away
		{now: []item{{"a", "2"}, {"b", ""}}, want: []item{{"b", ""}}},  // and came back
		{now: nil, want: nil},
		{now: []item{{"a", "2"}}, want: []item{{"a", "2"}}},
	}
	for i, s := range steps {
		if got := fresh(&current, s.now, id); !slices.Equal(got, s.want) {
			t.Errorf("step %d: fresh(%v) = %v, want %v", i, s.now, got, s.want)
		}
	}
}
