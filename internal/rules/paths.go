package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The paths of the fields the rules report errors on.
var (
	specPath         = field.NewPath("spec")
	namePath         = field.NewPath("metadata", "name")
	generateNamePath = field.NewPath("metadata", "generateName")
	enginePath       = specPath.Child("engine")
	versionPath      = specPath.Child("version")
	imagePath        = specPath.Child("image")
	replicasPath     = specPath.Child("replicas")
	sizePath         = specPath.Child("storage", "size")
	storageClassPath = specPath.Child("storage", "storageClassName")
	resourcesPath    = specPath.Child("resources")
	databaseNamePath = specPath.Child("databaseName")
	usernamePath     = specPath.Child("username")
	portPath         = specPath.Child("port")
	parametersPath   = specPath.Child("parameters")
	policyPath       = specPath.Child("deletionPolicy")
	netPolicyPath    = specPath.Child("networkPolicy")
	protectionPath   = specPath.Child("deletionProtection")
	primaryPath      = specPath.Child("primary")
	failoverPath     = specPath.Child("failoverTimeout")
	maxLagPath       = specPath.Child("maxLagOnFailover")
	backupPath       = specPath.Child("backup")
	bootstrapPath    = specPath.Child("bootstrap")
)

// reportOrder is the order in which Validate reports the spec's fields.
var reportOrder = []*field.Path{
	enginePath, versionPath, imagePath, replicasPath, specPath.Child("storage"), resourcesPath,
	portPath, databaseNamePath, usernamePath, parametersPath, policyPath, primaryPath, failoverPath, maxLagPath,
	synchronousPath, backupPath, tlsPath, monitoringPath, bootstrapPath,
}

// FieldRank orders field paths as Validate reports them: metadata first,
// then the spec's fields in reportOrder, then any other. Admission uses it
// to merge errors found before decoding into Validate's.
func FieldRank(path string) int {
	if !strings.HasPrefix(path, specPath.String()+".") {
		return -1
	}
	for i, p := range reportOrder {
		if prefix := p.String(); path == prefix || strings.HasPrefix(path, prefix+".") || strings.HasPrefix(path, prefix+"[") {
			return i
		}
	}
	return len(reportOrder)
}
