package postgres

import (
	"fmt"
	"testing"
)

func TestPlaceholderHistories(t *testing.T) {
	for _, tc := range []struct {
		own, above uint32
		want       string
	}{
		{3, 3, "[]"},
		{3, 2, "[]"},
		{3, 5, "[00000004.history 00000005.history]"},
		{9, 11, "[0000000A.history 0000000B.history]"},
	} {
		if got := fmt.Sprint(PlaceholderHistories(tc.own, tc.above)); got != tc.want {
			t.Errorf("PlaceholderHistories(%d, %d) = %s, want %s", tc.own, tc.above, got, tc.want)
		}
	}
}
