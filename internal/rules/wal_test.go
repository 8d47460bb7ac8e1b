package rules_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestValidateBoundOfASlotsWAL(t *testing.T) {
	const key = "spec.parameters[max_slot_wal_keep_size]"
	tests := []struct {
		name   string
		opts   []fixture.Option
		want   []fieldError
		detail []string
	}{
		{name: "no bound: dbkeeper's default", opts: nil},
		{name: "a size in megabytes without a unit", opts: []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "512")}},
		{name: "the whole volume", opts: []fixture.Option{fixture.WithStorageSize("10Gi"), fixture.WithParameter("max_slot_wal_keep_size", "10GB")}},
		{name: "0: legal, with a warning", opts: []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "0")}},
		{name: "a fraction with a unit", opts: []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "0.5GB")}},
		{
			name: "-1, unlimited, names the field, why and the fix",
			opts: []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "-1")},
			want: []fieldError{invalidAt(key)},
			detail: []string{`Invalid value: "-1": may not be negative: -1 (unlimited) lets the replication slot of a standby that stops streaming fill the primary's volume`,
				"remove the key for dbkeeper's default, a quarter of spec.storage.size (256MB)"},
		},
		{
			name:   "more than the volume",
			opts:   []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "2GB")},
			want:   []fieldError{invalidAt(key)},
			detail: []string{"exceeds spec.storage.size (1Gi)", "set at most 1024MB"},
		},
		{
			name:   "just more than the volume, in kilobytes",
			opts:   []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "1049600kB")},
			want:   []fieldError{invalidAt(key)},
			detail: []string{"exceeds spec.storage.size"},
		},
		{
			name:   "not a size",
			opts:   []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "lots")},
			want:   []fieldError{invalidAt(key)},
			detail: []string{"must be a PostgreSQL size", "e.g. 2GB"},
		},
		{
			name:   "a Kubernetes quantity is not a PostgreSQL size",
			opts:   []fixture.Option{fixture.WithParameter("max_slot_wal_keep_size", "1Gi")},
			want:   []fieldError{invalidAt(key)},
			detail: []string{`unit "Gi" is not one of B, kB, MB, GB and TB`},
		},
		{
			name:   "spelt otherwise, the same limits hold",
			opts:   []fixture.Option{fixture.WithParameter("Max-Slot-WAL-Keep-Size", "-1")},
			want:   []fieldError{invalidAt("spec.parameters[Max-Slot-WAL-Keep-Size]")},
			detail: []string{"may not be negative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := testRules.ValidateCreate(valid(tt.opts...))
			assertErrors(t, errs, tt.want...)
			if len(tt.want) > 0 {
				assertDetail(t, errs, tt.want[0].Field, tt.detail...)
			}
		})
	}
	t.Run("mysql has no such setting: the key is the server's business", func(t *testing.T) {
		_, errs := testRules.ValidateCreate(validMySQL(fixture.WithParameter("max_slot_wal_keep_size", "-1")))
		assertErrors(t, errs)
	})
}

func TestWarningsOfTheBoundOfASlotsWAL(t *testing.T) {
	zero := "spec.parameters[max_slot_wal_keep_size] is 0: the replication slot of a standby that falls behind at all"
	half := "spec.parameters[max_slot_wal_keep_size] is 600MB, more than half of spec.storage.size (1Gi)"
	tests := []struct {
		name     string
		old, new []fixture.Option
		create   bool
		want     []string
	}{
		{name: "0 on create", create: true, new: []fixture.Option{fixture.WithReplicas(3), fixture.WithParameter("max_slot_wal_keep_size", "0")}, want: []string{zero}},
		{name: "more than half of the volume on create", create: true, new: []fixture.Option{fixture.WithReplicas(3), fixture.WithParameter("max_slot_wal_keep_size", "600MB")}, want: []string{half}},
		{name: "half of the volume warns of nothing", create: true, new: []fixture.Option{fixture.WithReplicas(3), fixture.WithParameter("max_slot_wal_keep_size", "512MB")}},
		{name: "the default warns of nothing", create: true, new: []fixture.Option{fixture.WithReplicas(3)}},
		{
			name: "set to 0 by an update",
			old:  []fixture.Option{fixture.WithReplicas(3)},
			new:  []fixture.Option{fixture.WithReplicas(3), fixture.WithParameter("max_slot_wal_keep_size", "0")},
			want: []string{zero},
		},
		{
			name: "an update that keeps 0 does not repeat the warning",
			old:  []fixture.Option{fixture.WithReplicas(3), fixture.WithParameter("max_slot_wal_keep_size", "0")},
			new:  []fixture.Option{fixture.WithReplicas(5), fixture.WithParameter("max_slot_wal_keep_size", "0")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var warnings []string
			if tt.create {
				warnings, _ = testRules.ValidateCreate(valid(tt.new...))
			} else {
				warnings, _ = testRules.ValidateUpdate(valid(tt.old...), valid(tt.new...))
			}
			warnings = slices.DeleteFunc(warnings, func(w string) bool { return !strings.Contains(w, "max_slot_wal_keep_size") })
			if len(warnings) != len(tt.want) {
				t.Fatalf("warnings = %q, want %q", warnings, tt.want)
			}
			for i := range warnings {
				if !strings.HasPrefix(warnings[i], tt.want[i]) {
					t.Errorf("warning %q, want it to start %q", warnings[i], tt.want[i])
				}
			}
		})
	}
}
