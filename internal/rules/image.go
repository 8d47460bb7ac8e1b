package rules

import (
	"regexp"
	"strings"
)

// imageRef is a container image reference split into its parts.
type imageRef struct {
	// repository is the image name without tag or digest, as written, e.g.
	// "postgres" or "docker.io/library/postgres".
	repository string
	// tag is the tag, "" when the reference has none.
	tag string
	// digest is the digest, e.g. "sha256:…", "" when the reference has none.
	digest string
}

// The grammar of image references, after github.com/distribution/reference,
// restricted to what dbkeeper accepts: sha256 digests only.
var (
	imageRepositoryRE = regexp.MustCompile(`^` +
		// optional registry host with optional port
		`(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?` +
		// path components
		`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	imageTagRE    = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127}$`)
	imageDigestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// maxImageRepositoryLength is the longest repository name registries accept.
const maxImageRepositoryLength = 255

// parseImage splits an image reference and checks its syntax. It returns the
// reference and, when the reference is malformed, what is wrong with it.
// The tag is the text after a ':' in the last path segment (a ':' before the
// last '/' separates a registry port); the digest follows '@'.
func parseImage(image string) (imageRef, string) {
	name, digest, hasDigest := strings.Cut(image, "@")
	ref := imageRef{repository: name, digest: digest}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		ref.repository, ref.tag = name[:i], name[i+1:]
		if ref.tag == "" {
			return ref, "the tag after ':' is empty"
		}
	}
	switch {
	case strings.ContainsFunc(image, isSpaceOrControl):
		return ref, "must not contain whitespace or control characters"
	case ref.repository == "":
		return ref, "the repository name is empty"
	case len(ref.repository) > maxImageRepositoryLength:
		return ref, "the repository name is longer than 255 characters"
	case !imageRepositoryRE.MatchString(ref.repository):
		return ref, "the repository must be an optional registry host followed by lowercase path components separated by '/', e.g. docker.io/library/postgres"
	case ref.tag != "" && !imageTagRE.MatchString(ref.tag):
		return ref, "the tag must be at most 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'"
	case hasDigest && !imageDigestRE.MatchString(digest):
		return ref, "the digest must be sha256: followed by 64 lowercase hexadecimal digits"
	}
	return ref, ""
}

func isSpaceOrControl(r rune) bool {
	return r <= ' ' || r == 0x7f
}

// normalizeRepository returns the fully qualified form of a repository the
// way container runtimes resolve it: "postgres", "library/postgres" and
// "docker.io/postgres" all name docker.io/library/postgres.
func normalizeRepository(repository string) string {
	domain, rest, found := strings.Cut(repository, "/")
	if !found || (!strings.ContainsAny(domain, ".:") && domain != "localhost") {
		domain, rest = "docker.io", repository
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	return domain + "/" + rest
}

// tagMatchesVersion reports whether an official image tag is of the given
// major version: the version itself, or the version followed by '.' or '-'
// ("17", "17.6", "17-alpine", "8.4.6"; not "16.10" for 17, not "8.0.43" for 8.4).
func tagMatchesVersion(tag, version string) bool {
	rest, ok := strings.CutPrefix(tag, version)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '-')
}
