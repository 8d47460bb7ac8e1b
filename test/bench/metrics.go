package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// metrics is one scrape of a Prometheus endpoint, by metric family name.
type metrics map[string]*dto.MetricFamily

// acceptHeader asks for the delimited protobuf format, which carries native
// histograms (controller-runtime's webhook and workqueue histograms have
// only decade-wide classic buckets), and falls back to text.
const acceptHeader = `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3`

// scrape reads the metrics at url with client.
func scrape(ctx context.Context, client *http.Client, url string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", acceptHeader)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("scraping %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	format := expfmt.ResponseFormat(resp.Header)
	if format.FormatType() == expfmt.TypeUnknown {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(resp.Body, format)
	out := metrics{}
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding the metrics of %s: %w", url, err)
		}
		out[mf.GetName()] = mf
	}
}

// labels returns a series' labels as a map.
func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// match selects series by their labels; nil selects all.
type match func(map[string]string) bool

// labelIs selects series whose label name has one of the values.
func labelIs(name string, values ...string) match {
	return func(l map[string]string) bool {
		for _, v := range values {
			if l[name] == v {
				return true
			}
		}
		return false
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// sum adds the values of the counter or gauge series of name selected by sel.
func (ms metrics) sum(name string, sel match) float64 {
	total := 0.0
	for _, m := range ms[name].GetMetric() {
		if sel == nil || sel(labels(m)) {
			total += value(m)
		}
	}
	return total
}

// by adds the values of the series of name selected by sel, grouped by key.
func (ms metrics) by(name string, sel match, key func(map[string]string) string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms[name].GetMetric() {
		l := labels(m)
		if sel == nil || sel(l) {
			out[key(l)] += value(m)
		}
	}
	return out
}

// delta returns after - before for every key of after.
func delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// histogram is a Prometheus histogram, possibly the sum of several series:
// its classic buckets and, when the series have them, native buckets.
type histogram struct {
	count, sum float64
	// classic maps each upper bound to its cumulative count.
	classic map[float64]float64
	// native is nil when the series carry no native histogram.
	native *nativeHistogram
}

// nativeHistogram holds the positive buckets of a native histogram: bucket
// i covers (base^(i-1), base^i] with base = 2^(2^-schema).
type nativeHistogram struct {
	schema        int32
	zeroThreshold float64
	zeroCount     float64
	buckets       map[int]float64
}

// histogram adds the histogram series of name selected by sel.
func (ms metrics) histogram(name string, sel match) histogram {
	h := histogram{classic: map[float64]float64{}}
	first := true
	for _, m := range ms[name].GetMetric() {
		if m.Histogram == nil || (sel != nil && !sel(labels(m))) {
			continue
		}
		one := fromDTO(m.Histogram)
		if first {
			h.native = one.native
			first = false
		} else if h.native != nil {
			if one.native == nil {
				h.native = nil
			} else {
				h.native = h.native.combine(one.native, 1)
			}
		}
		h.count += one.count
		h.sum += one.sum
		for le, c := range one.classic {
			h.classic[le] += c
		}
	}
	return h
}

func fromDTO(d *dto.Histogram) histogram {
	h := histogram{count: float64(d.GetSampleCount()), sum: d.GetSampleSum(), classic: map[float64]float64{}}
	if d.GetSampleCountFloat() > 0 {
		h.count = d.GetSampleCountFloat()
	}
	for _, b := range d.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if b.GetCumulativeCountFloat() > 0 {
			c = b.GetCumulativeCountFloat()
		}
		h.classic[b.GetUpperBound()] = c
	}
	if d.Schema == nil || (len(d.GetPositiveSpan()) == 0 && d.ZeroThreshold == nil) {
		return h
	}
	n := &nativeHistogram{schema: d.GetSchema(), zeroThreshold: d.GetZeroThreshold(), zeroCount: float64(d.GetZeroCount()), buckets: map[int]float64{}}
	if d.GetZeroCountFloat() > 0 {
		n.zeroCount = d.GetZeroCountFloat()
	}
	idx, pos := 0, 0
	running := int64(0)
	for i, span := range d.GetPositiveSpan() {
		if i == 0 {
			idx = int(span.GetOffset())
		} else {
			idx += int(span.GetOffset())
		}
		for range span.GetLength() {
			var c float64
			if len(d.GetPositiveCount()) > 0 {
				c = d.GetPositiveCount()[pos]
			} else {
				running += d.GetPositiveDelta()[pos]
				c = float64(running)
			}
			n.buckets[idx] += c
			idx++
			pos++
		}
	}
	h.native = n
	return h
}

// downscaled returns the buckets at a lower (coarser) schema.
func (n *nativeHistogram) downscaled(schema int32) map[int]float64 {
	if schema >= n.schema {
		return n.buckets
	}
	out := map[int]float64{}
	shift := n.schema - schema
	for i, c := range n.buckets {
		j := i
		for range shift {
			j = (j + 1) >> 1 // bucket i of schema s lies in bucket ceil(i/2) of schema s-1
		}
		out[j] += c
	}
	return out
}

// combine returns n + sign*o at the coarser of the two schemas.
func (n *nativeHistogram) combine(o *nativeHistogram, sign float64) *nativeHistogram {
	schema := min(n.schema, o.schema)
	out := &nativeHistogram{schema: schema, zeroThreshold: max(n.zeroThreshold, o.zeroThreshold),
		zeroCount: n.zeroCount + sign*o.zeroCount, buckets: map[int]float64{}}
	for i, c := range n.downscaled(schema) {
		out.buckets[i] += c
	}
	for i, c := range o.downscaled(schema) {
		out.buckets[i] += sign * c
	}
	return out
}

// minus returns the observations made between the scrapes before and h.
func (h histogram) minus(before histogram) histogram {
	out := histogram{count: h.count - before.count, sum: h.sum - before.sum, classic: map[float64]float64{}}
	for le, c := range h.classic {
		out.classic[le] = c - before.classic[le]
	}
	if h.native != nil && before.native != nil {
		out.native = h.native.combine(before.native, -1)
	} else if h.native != nil && before.count == 0 {
		out.native = h.native
	}
	return out
}

// mean is the average observation, NaN without observations.
func (h histogram) mean() float64 {
	if h.count <= 0 {
		return math.NaN()
	}
	return h.sum / h.count
}

// quantile estimates the q-quantile: from the native buckets when there are
// some (interpolating exponentially inside a bucket), otherwise from the
// classic ones as Prometheus' histogram_quantile does (linearly).
func (h histogram) quantile(q float64) float64 {
	if h.count <= 0 {
		return math.NaN()
	}
	if h.native != nil {
		return h.native.quantile(q, h.count)
	}
	bounds := make([]float64, 0, len(h.classic))
	for le := range h.classic {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	rank := q * h.count
	lower, below := 0.0, 0.0
	for _, le := range bounds {
		c := h.classic[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			if c == below {
				return le
			}
			return lower + (le-lower)*(rank-below)/(c-below)
		}
		lower, below = le, c
	}
	return lower
}

func (n *nativeHistogram) quantile(q, count float64) float64 {
	rank := q * count
	if rank <= n.zeroCount {
		return n.zeroThreshold * rank / math.Max(n.zeroCount, 1)
	}
	idx := make([]int, 0, len(n.buckets))
	for i := range n.buckets {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	base := math.Pow(2, math.Pow(2, -float64(n.schema)))
	below := n.zeroCount
	for _, i := range idx {
		c := n.buckets[i]
		if c <= 0 {
			continue
		}
		if below+c >= rank {
			upper := math.Pow(base, float64(i))
			lower := upper / base
			frac := (rank - below) / c
			return lower * math.Pow(upper/lower, frac)
		}
		below += c
	}
	if len(idx) == 0 {
		return math.NaN()
	}
	return math.Pow(base, float64(idx[len(idx)-1]))
}
