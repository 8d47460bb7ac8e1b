package rules

// The internals the external tests (package rules_test) check.
var (
	DefaultStorageSize   = defaultStorageSize
	CompareQuantities    = compareQuantities
	QuantityString       = quantityString
	SpecEquality         = specEquality
	ReportOrder          = reportOrder
	AppendRestartWarning = appendRestartWarning
	WarnSingleReplica    = warnSingleReplica
	RefusedParameter     = refusedParameter
	ParameterValueRules  = parameterValueRules
)
