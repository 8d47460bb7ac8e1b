package rules_test

import (
	"slices"
	"strings"
	"testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestValidateSynchronous(t *testing.T) {
	tests := []struct {
		name   string
		db     *dbv1.Database
		want   []fieldError
		detail []string
	}{
		{
			name: "one of two standbys",
			db:   valid(fixture.WithReplicas(3), fixture.WithSynchronous(1)),
		},
		{
			name: "every standby",
			db:   valid(fixture.WithReplicas(3), fixture.WithSynchronous(2)),
		},
		{
			name: "the one standby of two pods",
			db:   valid(fixture.WithReplicas(2), fixture.WithSynchronous(1)),
		},
		{
			name: "synchronous_commit on and remote_apply keep the guarantee",
			db: valid(fixture.WithReplicas(3), fixture.WithSynchronous(1),
				fixture.WithParameters(map[string]string{"synchronous_commit": "remote_apply"})),
		},
		{
			name:   "on mysql",
			db:     validMySQL(fixture.WithSynchronous(1)),
			want:   []fieldError{forbidden("spec.synchronous")},
			detail: []string{"mysql runs a single server, with no standby to wait for: remove spec.synchronous"},
		},
		{
			name:   "on a single server",
			db:     valid(fixture.WithSynchronous(1)),
			want:   []fieldError{invalidAt("spec.synchronous.standbys")},
			detail: []string{"spec.replicas is 1, so there is no standby to wait for: set spec.replicas to at least 2, or remove spec.synchronous"},
		},
		{
			name:   "more standbys than the Database has",
			db:     valid(fixture.WithReplicas(3), fixture.WithSynchronous(3)),
			want:   []fieldError{invalidAt("spec.synchronous.standbys")},
			detail: []string{"must be between 1 and spec.replicas - 1 (2)", "raise spec.replicas, or remove spec.synchronous"},
		},
		{
			name:   "no standby",
			db:     valid(fixture.WithReplicas(3), fixture.WithSynchronous(0)),
			want:   []fieldError{invalidAt("spec.synchronous.standbys")},
			detail: []string{"must be between 1 and spec.replicas - 1 (2)"},
		},
		{
			name: "replicas out of range are reported on spec.replicas alone",
			db:   valid(fixture.WithReplicas(12), fixture.WithSynchronous(3)),
			want: []fieldError{invalidAt("spec.replicas")},
		},
		{
			name: "the user's synchronous_standby_names",
			db: valid(fixture.WithReplicas(3), fixture.WithSynchronous(1),
				fixture.WithParameter("synchronous_standby_names", "*")),
			want:   []fieldError{forbidden("spec.parameters[synchronous_standby_names]")},
			detail: []string{"owned by dbkeeper for replication; set spec.synchronous.standbys instead"},
		},
		{
			name:   "synchronous_standby_names without spec.synchronous",
			db:     valid(fixture.WithReplicas(3), fixture.WithParameter("synchronous-standby-names", "ANY 1 (*)")),
			want:   []fieldError{forbidden("spec.parameters[synchronous-standby-names]")},
			detail: []string{"set spec.synchronous.standbys instead"},
		},
		{
			name: "synchronous_commit that does not wait for the standbys",
			db: valid(fixture.WithReplicas(3), fixture.WithSynchronous(1),
				fixture.WithParameters(map[string]string{"synchronous_commit": "local", "work_mem": "8MB"})),
			want: []fieldError{forbidden("spec.parameters[synchronous_commit]")},
			detail: []string{`synchronous_commit "local" acknowledges a commit before spec.synchronous.standbys standbys have it on disk`,
				"remove the key (dbkeeper keeps synchronous_commit on), set it to on or remote_apply, or remove spec.synchronous"},
		},
		{
			name: "synchronous_commit off in any spelling",
			db: valid(fixture.WithReplicas(2), fixture.WithSynchronous(1),
				fixture.WithParameters(map[string]string{"Synchronous_Commit": "'OFF'"})),
			want: []fieldError{forbidden("spec.parameters[Synchronous_Commit]")},
		},
		{
			name: "synchronous_commit off without spec.synchronous is the user's choice",
			db:   valid(fixture.WithReplicas(3), fixture.WithParameter("synchronous_commit", "off")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := testRules.Validate(tt.db)
			assertErrors(t, errs, tt.want...)
			if len(tt.detail) > 0 {
				assertDetail(t, errs, tt.want[len(tt.want)-1].Field, tt.detail...)
			}
		})
	}
}

func TestScaleDownBelowTheSynchronousStandbysIsRefused(t *testing.T) {
	old := defaulted(fixture.WithReplicas(3), fixture.WithSynchronous(2))
	scaled := defaulted(fixture.WithReplicas(2), fixture.WithSynchronous(2))
	_, errs := testRules.ValidateUpdate(old, scaled)
	assertErrors(t, errs, invalidAt("spec.synchronous.standbys"))
	assertDetail(t, errs, "spec.synchronous.standbys", "must be between 1 and spec.replicas - 1 (1)")
}

func TestSynchronousWarnings(t *testing.T) {
	tests := []struct {
		name     string
		old, new *dbv1.Database
		want     []string
	}{
		{
			name: "one of two standbys, on create",
			new:  defaulted(fixture.WithReplicas(3), fixture.WithSynchronous(1)),
			want: []string{"spec.synchronous.standbys is 1 of 2 standbys: writes stop while fewer than 1 stream from the primary, and a failover waits until dbkeeper hears from 2 standbys, so that it promotes one holding every acknowledged commit"},
		},
		{
			name: "every standby, turned on",
			old:  defaulted(fixture.WithReplicas(3)),
			new:  defaulted(fixture.WithReplicas(3), fixture.WithSynchronous(2)),
			want: []string{"spec.synchronous.standbys is 2, every standby: each commit waits until all of them have flushed it, and writes stop whenever one is down (a restart, a rolling change, a lost node)"},
		},
		{
			name: "unchanged: no warning again",
			old:  defaulted(fixture.WithReplicas(3), fixture.WithSynchronous(1), fixture.WithStorageSize("2Gi")),
			new:  defaulted(fixture.WithReplicas(3), fixture.WithSynchronous(1), fixture.WithStorageSize("3Gi")),
		},
		{
			name: "refused: no warning",
			new:  defaulted(fixture.WithReplicas(3), fixture.WithSynchronous(3)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var warnings []string
			if tt.old == nil {
				warnings, _ = testRules.ValidateCreate(tt.new)
			} else {
				warnings, _ = testRules.ValidateUpdate(tt.old, tt.new)
			}
			var got []string
			for _, w := range warnings {
				if strings.HasPrefix(w, "spec.synchronous") {
					got = append(got, w)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("warnings about spec.synchronous:\n got  %q\n want %q", got, tt.want)
			}
		})
	}
}
