package desired

import (
	"bytes"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Changes returns the paths of the fields that differ between desired, an
// apply configuration built by this package, and owned, the apply
// configuration extracted from the live object for FieldManager (for
// example with appsv1ac.ExtractStatefulSet). An empty result means the live
// object already holds everything desired and no write is needed.
//
// Both are compared in their JSON forms. A field present on one side only is
// a change: missing from owned, it must be added; missing from desired, it
// must be removed (applying desired does that). Lists whose items all carry a
// distinct "name" (containers, env, ports, volumes, volume mounts) or
// "metadata.name" (volumeClaimTemplates) are matched by that name, and a
// reordering of their items is a change of the list; other lists of objects
// of equal length are compared item by item, and all remaining lists whole.
// Resource quantities (under "requests", "limits" or "overhead", and
// "sizeLimit") are compared by value, so 1Gi equals 1024Mi. The apiVersion
// and kind of a StatefulSet's claim templates are not compared: whether the
// live object shows them depends on the encoding it was read in.
//
// Paths are dotted, with keys that are not plain identifiers quoted
// (metadata.labels["app.kubernetes.io/name"]) and list items named by their
// key (spec.template.spec.containers[name=postgres].image) or index. They
// never include values, so a changed Secret reports "data.password" and
// nothing of the password. The result is sorted.
//
// A nil owned differs in every top-level field of desired. When either does
// not encode as JSON the result is ["."]: everything may differ.
func Changes(desired, owned any) []string {
	d, okD := toJSONValue(desired)
	o, okO := toJSONValue(owned)
	if !okD || !okO {
		return []string{"."}
	}
	var c collector
	c.walk("", "", false, d, o)
	slices.Sort(c.paths)
	return slices.Compact(c.paths)
}

// toJSONValue returns v's JSON form as nested map[string]any, []any, string,
// json.Number, bool and nil, and false when v does not encode.
func toJSONValue(v any) (any, bool) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, false
	}
	return out, true
}

// collector gathers the paths that differ.
type collector struct {
	paths []string
}

// quantityParents are the keys whose values are maps of resource quantities.
var quantityParents = map[string]bool{"requests": true, "limits": true, "overhead": true}

// isQuantity reports whether the value at key k of the object at key parent
// is a resource quantity.
func isQuantity(parent, k string) bool {
	return quantityParents[parent] || k == "sizeLimit"
}

// walk compares d and o, the values at path of the map key key. quantity
// says that they are resource quantities.
func (c *collector) walk(path, key string, quantity bool, d, o any) {
	switch dv := d.(type) {
	case map[string]any:
		ov, ok := o.(map[string]any)
		if !ok && o != nil {
			c.add(path)
			return
		}
		c.walkMap(path, key, dv, ov)
	case nil:
		if ov, ok := o.(map[string]any); ok {
			c.walkMap(path, key, nil, ov)
			return
		}
		if o != nil {
			c.add(path)
		}
	case []any:
		ov, ok := o.([]any)
		if !ok {
			c.add(path)
			return
		}
		c.walkList(path, key, dv, ov)
	default:
		if !scalarEqual(quantity, d, o) {
			c.add(path)
		}
	}
}

// walkMap compares two objects key by key in sorted order. A key whose value
// is null counts as absent.
func (c *collector) walkMap(path, key string, d, o map[string]any) {
	keys := make([]string, 0, len(d)+len(o))
	for k, v := range d {
		if v != nil {
			keys = append(keys, k)
		}
	}
	for k, v := range o {
		if v != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, k := range keys {
		dv, ov := d[k], o[k]
		if dv == nil || ov == nil {
			c.add(join(path, k))
			continue
		}
		c.walk(join(path, k), k, isQuantity(key, k), dv, ov)
	}
}

// ignoredItemFields are fields of list items that Changes does not compare,
// by the list's key. A StatefulSet's claim templates carry apiVersion and
// kind when read as JSON but not as protobuf (the encoding
// controller-runtime's client uses for built-in types), since protobuf does
// not encode a nested object's type; the API server sets them to v1
// PersistentVolumeClaim whatever was applied.
var ignoredItemFields = map[string][]string{
	"volumeClaimTemplates": {"apiVersion", "kind"},
}

// withoutIgnored returns the items of the list at key without the fields
// Changes does not compare. The items are copied, not changed.
func withoutIgnored(key string, list []any) []any {
	fields := ignoredItemFields[key]
	if len(fields) == 0 {
		return list
	}
	out := make([]any, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			out[i] = item
			continue
		}
		m = maps.Clone(m)
		for _, f := range fields {
			delete(m, f)
		}
		out[i] = m
	}
	return out
}

// walkList compares two lists: by item name when every item of both has a
// distinct one, item by item when both are lists of objects of the same
// length, and whole otherwise.
func (c *collector) walkList(path, key string, d, o []any) {
	d, o = withoutIgnored(key, d), withoutIgnored(key, o)
	dNames, dOK := itemNames(d)
	oNames, oOK := itemNames(o)
	if dOK && oOK {
		dIndex, oIndex := indexOf(dNames), indexOf(oNames)
		dCommon := make([]string, 0, len(dNames))
		oCommon := make([]string, 0, len(oNames))
		for i, n := range dNames {
			item := path + "[name=" + n + "]"
			j, ok := oIndex[n]
			if !ok {
				c.add(item)
				continue
			}
			dCommon = append(dCommon, n)
			c.walk(item, key, false, d[i], o[j])
		}
		for _, n := range oNames {
			if _, ok := dIndex[n]; !ok {
				c.add(path + "[name=" + n + "]")
				continue
			}
			oCommon = append(oCommon, n)
		}
		if !slices.Equal(dCommon, oCommon) {
			c.add(path) // same items, another order
		}
		return
	}
	if len(d) != len(o) {
		c.add(path)
		return
	}
	if allObjects(d) && allObjects(o) {
		for i := range d {
			c.walk(path+"["+strconv.Itoa(i)+"]", key, false, d[i], o[i])
		}
		return
	}
	for i := range d {
		var item collector
		item.walk("", key, false, d[i], o[i])
		if len(item.paths) > 0 {
			c.add(path)
			return
		}
	}
}

// itemNames returns the names of a list's items, from "name" or else
// "metadata.name", and false unless every item is an object with a name and
// the names are distinct. An empty list has no names.
func itemNames(list []any) ([]string, bool) {
	if len(list) == 0 {
		return nil, false
	}
	names := make([]string, 0, len(list))
	seen := make(map[string]bool, len(list))
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, false
		}
		name, ok := m["name"].(string)
		if !ok {
			meta, _ := m["metadata"].(map[string]any)
			name, ok = meta["name"].(string)
		}
		if !ok || seen[name] {
			return nil, false
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, true
}

func indexOf(names []string) map[string]int {
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	return index
}

func allObjects(list []any) bool {
	for _, item := range list {
		if _, ok := item.(map[string]any); !ok {
			return false
		}
	}
	return true
}

// scalarEqual compares two JSON scalars, as resource quantities when
// quantity is true.
func scalarEqual(quantity bool, d, o any) bool {
	if d == o {
		return true
	}
	if !quantity {
		return false
	}
	dq, ok := parseQuantity(d)
	if !ok {
		return false
	}
	oq, ok := parseQuantity(o)
	return ok && dq.Cmp(oq) == 0
}

// parseQuantity parses a JSON string or number as a resource quantity.
func parseQuantity(v any) (resource.Quantity, bool) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	default:
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(s)
	return q, err == nil
}

// plainKey matches keys written after a dot; others are quoted.
var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// join appends key to path.
func join(path, key string) string {
	if !plainKey.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// add records path, the root as ".".
func (c *collector) add(path string) {
	if path == "" {
		path = "."
	}
	c.paths = append(c.paths, path)
}
