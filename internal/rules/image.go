package rules

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
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

// validateImage checks that the image names an explicit tag or digest, not
// "latest", and that an official image of the engine, from the operator's
// registry or docker.io/library, is of spec.version.
func (r Rules) validateImage(engine *catalog.EngineInfo, version *catalog.VersionInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	if spec.Image == "" {
		// Without a valid engine and version there is no default to expect;
		// their own errors say why.
		if version != nil {
			*errs = append(*errs, field.Required(imagePath, ""))
		}
		return
	}
	ref, problem := parseImage(spec.Image)
	switch {
	case problem != "":
		*errs = append(*errs, field.Invalid(imagePath, spec.Image, problem))
		return
	case ref.tag == "" && ref.digest == "":
		*errs = append(*errs, field.Invalid(imagePath, spec.Image,
			"must name a tag or a digest, e.g. "+r.exampleImage(engine, version)+"; without one the image is :latest"))
		return
	case ref.tag == "latest":
		*errs = append(*errs, field.Invalid(imagePath, spec.Image,
			`must not use the tag "latest", which moves: pods restarted at different times would run different versions; name a version, e.g. `+r.exampleImage(engine, version)))
		return
	}
	if engine == nil || version == nil || ref.tag == "" {
		return
	}
	// The official image, from the operator's registry or the default one,
	// has the major version in its tag.
	repository := normalizeRepository(ref.repository)
	if repository != normalizeRepository(r.registry()+"/"+engine.Image) &&
		repository != normalizeRepository(catalog.DefaultImageRegistry+"/"+engine.Image) {
		return
	}
	if !tagMatchesVersion(ref.tag, version.Version) {
		*errs = append(*errs, field.Invalid(imagePath, spec.Image, fmt.Sprintf(
			"the tag %s is not %s %s (spec.version): use a %s.x tag, or leave spec.image empty to run the default %s",
			ref.tag, engine.Name, version.Version, version.Version, version.Tag)))
	}
}

// exampleImage returns an image reference to quote in messages.
func (r Rules) exampleImage(engine *catalog.EngineInfo, version *catalog.VersionInfo) string {
	if engine == nil {
		engine, _ = catalog.LookupEngine(catalog.DefaultEngine)
	}
	v := engine.DefaultVersion
	if version != nil {
		v = version.Version
	}
	image, _ := engine.DefaultImage(r.registry(), v)
	return image
}

// tagVersionRE is a tag that begins with a version: one or two numbers of
// at most two digits (longer ones are dates or build numbers), then the end
// of the tag or a separator ("15.20", "8.0.43", "17-bookworm").
var tagVersionRE = regexp.MustCompile(`^([0-9]{1,2})(?:\.([0-9]{1,2}))?(?:$|[.\-_])`)

// imageVersionWarning returns a warning when spec.image is not an official
// image of the engine (those are refused instead, by validateImage) and its
// tag begins with a version other than spec.version, compared on as many
// parts as spec.version has ("15.20" is not postgres 17; "8.0.43" is not
// mysql 8.4): the server would run that version while the Database says
// another. A tag without a version, or a digest alone, says nothing.
func (r Rules) imageVersionWarning(spec *dbv1.DatabaseSpec) string {
	engine, ok := catalog.LookupEngine(spec.Engine)
	if !ok || spec.Image == "" || spec.Version == "" {
		return ""
	}
	ref, problem := parseImage(spec.Image)
	if problem != "" || ref.tag == "" {
		return ""
	}
	repository := normalizeRepository(ref.repository)
	if repository == normalizeRepository(r.registry()+"/"+engine.Image) ||
		repository == normalizeRepository(catalog.DefaultImageRegistry+"/"+engine.Image) {
		return ""
	}
	m := tagVersionRE.FindStringSubmatch(ref.tag)
	want := strings.Split(spec.Version, ".")
	if m == nil || len(want) > 2 || (len(want) == 2 && m[2] == "") {
		return ""
	}
	tagVersion := strings.Join(m[1:1+len(want)], ".")
	if tagVersion == spec.Version {
		return ""
	}
	return fmt.Sprintf("spec.image: the tag %s names version %s, not %s %s (spec.version): the server runs the image's version whatever spec.version says; use a %s %s image",
		ref.tag, tagVersion, engine.Name, spec.Version, engine.Name, spec.Version)
}
