package rules

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// digest is a well-formed sha256 digest.
const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseImage(t *testing.T) {
	tests := []struct {
		image           string
		repository, tag string
		digest          string
		malformed       bool
	}{
		{image: "postgres:17.6", repository: "postgres", tag: "17.6"},
		{image: "docker.io/library/postgres:17.6", repository: "docker.io/library/postgres", tag: "17.6"},
		{image: "registry.local:5000/db/postgres", repository: "registry.local:5000/db/postgres"},
		{image: "registry.local:5000/db/postgres:17", repository: "registry.local:5000/db/postgres", tag: "17"},
		{image: "postgres@" + digest, repository: "postgres", digest: digest},
		{image: "postgres:17@" + digest, repository: "postgres", tag: "17", digest: digest},
		{image: "localhost/pg_x__y-z.a:v1_2", repository: "localhost/pg_x__y-z.a", tag: "v1_2"},
		{image: "postgres:", malformed: true},
		{image: ":17", malformed: true},
		{image: "/postgres:17", malformed: true},
		{image: "postgres//x:17", malformed: true},
		{image: "postgres-:17", malformed: true},
		{image: "postgres:.17", malformed: true},
		{image: "postgres@md5:abc", malformed: true},
		{image: "postgres\t:17", malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			ref, problem := parseImage(tt.image)
			if (problem != "") != tt.malformed {
				t.Fatalf("problem = %q, want malformed %v", problem, tt.malformed)
			}
			if !tt.malformed && (ref.repository != tt.repository || ref.tag != tt.tag || ref.digest != tt.digest) {
				t.Errorf("parsed %+v, want repository %q tag %q digest %q", ref, tt.repository, tt.tag, tt.digest)
			}
		})
	}
}

func TestNormalizeRepository(t *testing.T) {
	tests := map[string]string{
		"postgres":                          "docker.io/library/postgres",
		"library/postgres":                  "docker.io/library/postgres",
		"docker.io/postgres":                "docker.io/library/postgres",
		"index.docker.io/library/postgres":  "docker.io/library/postgres",
		"bitnami/postgresql":                "docker.io/bitnami/postgresql",
		"localhost/postgres":                "localhost/postgres",
		"registry.local:5000/postgres":      "registry.local:5000/postgres",
		"registry.example.com/mirror/mysql": "registry.example.com/mirror/mysql",
	}
	for in, want := range tests {
		if got := normalizeRepository(in); got != want {
			t.Errorf("normalizeRepository(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTagMatchesVersion(t *testing.T) {
	tests := []struct {
		tag, version string
		want         bool
	}{
		{"17", "17", true},
		{"17.6", "17", true},
		{"17.6-bookworm", "17", true},
		{"17-alpine", "17", true},
		{"8.4.6", "8.4", true},
		{"8.4", "8.4", true},
		{"16.10", "17", false},
		{"170", "17", false},
		{"8.40", "8.4", false},
		{"8.0.43", "8.4", false},
		{"alpine", "17", false},
		{"v17", "17", false},
	}
	for _, tt := range tests {
		if got := tagMatchesVersion(tt.tag, tt.version); got != tt.want {
			t.Errorf("tagMatchesVersion(%q, %q) = %v, want %v", tt.tag, tt.version, got, tt.want)
		}
	}
}

func TestCompareQuantitiesNeverDoesExactArithmeticOutOfRange(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		a, b    string
		want    int
		inRange bool
	}{
		{"1Gi", "1024Mi", 0, true},
		{"5Gi", "10Gi", -1, true},
		{"1n", "0", 1, true},
		{"9e999999999", "64Ti", 1, false},
		{"-9e999999999", "0", -1, false},
		{"9e999999999", "8e999999999", 0, false}, // both +Inf: equal, as far as validation cares
		{"1Gi", "0e999999999", 1, true},          // a zero with a huge exponent is out of range, compared by sign, never rescaled
		{"0e999999999", "1Gi", -1, false},
		{"0e-999999999", "0", 0, false},
		{"0e18", "1", -1, true},
	}
	for _, tt := range tests {
		if got := compareQuantities(q(tt.a), q(tt.b)); got != tt.want {
			t.Errorf("compareQuantities(%s, %s) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := quantityInRange(q(tt.a)); got != tt.inRange {
			t.Errorf("quantityInRange(%s) = %v, want %v", tt.a, got, tt.inRange)
		}
	}
}
