// More structural converters, decomposed at import onto the contract's ops: GatherND, ScatterND,
// TensorScatter (a linear index and gather/scatter), Einsum (diagonal masks, sums, one matmul per
// pair), DepthToSpace/SpaceToDepth (view, permute, view), CenterCropPad, ReverseSequence, BitCast.
// Unique, NonZero and Compress have data-dependent output sizes: folded when their input is a
// constant, refused otherwise.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "convert.h"
#include "tessera/dispatch_key.h"

namespace tessera::onnx::detail {

namespace {

const DispatchKeySet kExportKey = DispatchKeySet::functionality(Functionality::Export);

int64_t static_dim(const NodeCtx& c, const SymSize& s, const std::string& what) {
  if (!s.is_constant()) c.fail(what + " has the dynamic size " + s.str() + "; it must be static (fix it with ImportOptions::fixed_dims)");
  return s.constant();
}

int64_t checked_mul(const NodeCtx& c, int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) c.fail(std::string(what) + " overflows");
  return r;
}

// x (of rank out.size(), each dim 1 or out's) broadcast to `out`, whose dims may be symbols.
Tensor broadcast_to(const NodeCtx& c, const Tensor& x, const Sizes& out) {
  const Sizes have = c.sizes(x);
  bool same = have.size() == out.size(), all_static = true;
  for (size_t i = 0; i < out.size(); ++i) {
    same = same && have[i].same_as(out[i]);
    all_static = all_static && out[i].is_constant();
  }
  if (same) return x;
  if (!all_static) return tessera::where(symbolic_ones(c, out), x, x);
  int64_t numel = 1;
  for (int64_t s : c.example(out)) numel = checked_mul(c, numel, s, "the broadcast index");
  c.check_elements(numel, "the broadcast index");
  return tessera::expand_copy(x, c.example(out));
}

// Sizes of rank `rank`, all 1 but `n` at `dim`.
Sizes one_hot_sizes(int64_t rank, int64_t dim, const SymSize& n) {
  Sizes s(size_t(rank), SymSize(int64_t(1)));
  s[size_t(dim)] = n;
  return s;
}

Tensor iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return host_tensor(v, {n}, kInt64);
}

// 0, 1, ..., n-1 (int64); a dynamic n (a plain symbol) is counted at run time.
Tensor counting(const NodeCtx& c, const SymSize& n, const char* what) {
  if (n.is_constant()) {
    c.check_elements(n.constant(), what);
    return iota(n.constant());
  }
  Tensor ones = symbolic_ones(c, {n}).to(kInt64);
  return tessera::sub(tessera::cumsum(ones, 0, kInt64), host_scalar(1, kInt64));
}

// The size n as a 1-element int64 tensor; a dynamic n (a plain symbol) is counted at run time.
Tensor size_value(const NodeCtx& c, const SymSize& n) {
  if (n.is_constant()) return host_tensor({n.constant()}, {1}, kInt64);
  return reshape_to(c, tessera::sum(symbolic_ones(c, {n}).to(kInt64), {0}, false), {SymSize(int64_t(1))});
}

// The row of each index tuple (the last dim of `idx`, one entry per dim of `dims`) in those dims
// flattened; a negative entry counts from the end of its dim.
Tensor linear_index(const NodeCtx& c, Tensor idx, const Sizes& dims) {
  const int64_t k = int64_t(dims.size());
  Tensor sizes_t, strides_t;
  if (product(dims, 0, dims.size()).is_constant()) {  // constants made here
    std::vector<int64_t> n, stride(static_cast<size_t>(k));
    int64_t s = 1;
    for (int64_t i = k - 1; i >= 0; --i) {
      stride[size_t(i)] = s;
      s = checked_mul(c, s, dims[size_t(i)].constant(), "the indexed dims' element count");
    }
    for (const SymSize& d : dims) n.push_back(d.constant());
    sizes_t = host_tensor(n, {k}, kInt64);
    strides_t = host_tensor(stride, {k}, kInt64);
  } else {
    std::vector<Tensor> size_list, stride_list(static_cast<size_t>(k));
    Tensor stride = host_tensor({1}, {1}, kInt64);
    for (int64_t i = k - 1; i >= 0; --i) {
      stride_list[size_t(i)] = stride;
      size_list.insert(size_list.begin(), size_value(c, dims[size_t(i)]));
      if (i > 0) stride = tessera::mul(stride, size_list.front());
    }
    sizes_t = tessera::cat(size_list, 0);
    strides_t = tessera::cat(stride_list, 0);
  }
  idx = idx.to(kInt64);
  idx = tessera::add(idx, tessera::mul(tessera::lt(idx, host_scalar(0, kInt64)).to(kInt64), sizes_t));
  return tessera::sum(tessera::mul(idx, strides_t), {-1}, false);
}

void GatherND(NodeCtx& c) {
  Tensor x = c.in(0), idx = c.in(1);
  const int64_t r = x.dim(), q = idx.dim(), b = c.attr_int("batch_dims", 0);
  const Sizes ds = c.sizes(x), is = c.sizes(idx);
  if (q < 1) c.fail("indices must have rank >= 1");
  if (b < 0 || b >= q || b >= r) c.fail("batch_dims " + std::to_string(b) + " must be below the ranks of data and indices");
  const int64_t k = static_dim(c, is.back(), "the indices' last dim");
  if (k < 1 || b + k > r) c.fail("index tuples of " + std::to_string(k) + " entries for data of rank " + std::to_string(r) + " with batch_dims " + std::to_string(b));
  const Sizes dims(ds.begin() + b, ds.begin() + b + k);
  Tensor lin = linear_index(c, idx, dims);  // indices' sizes but the last
  const SymSize per = product(dims, 0, dims.size());
  int64_t batch = 1;
  bool static_batch = per.is_constant();
  for (int64_t d = 0; d < b; ++d) {
    if (!c.same(is[size_t(d)], ds[size_t(d)])) c.fail("batch dim " + std::to_string(d) + " is " + is[size_t(d)].str() + " in indices, " + ds[size_t(d)].str() + " in data");
    static_batch = static_batch && ds[size_t(d)].is_constant();
  }
  Sizes out(is.begin(), is.end() - 1);
  out.insert(out.end(), ds.begin() + b + k, ds.end());
  if (b > 0 && !static_batch) {
    // Dynamic batch or indexed dims: data as [batch, rows, rest], each batch gathering its own rows
    // (the index broadcast over the rest).
    const SymSize nb = product(ds, 0, size_t(b)), mid = product(is, size_t(b), size_t(q - 1));
    Sizes data3{nb, per}, idx3{nb, mid}, at{nb, mid};
    data3.insert(data3.end(), ds.begin() + b + k, ds.end());
    idx3.insert(idx3.end(), ds.begin() + b + k, ds.end());
    at.resize(idx3.size(), SymSize(int64_t(1)));
    Tensor index = broadcast_to(c, reshape_to(c, lin, at), idx3);
    return c.out(0, reshape_to(c, tessera::gather(reshape_to(c, x, data3), 1, index), out));
  }
  if (b > 0) {
    Sizes at(size_t(q - 1), SymSize(int64_t(1)));
    for (int64_t d = 0; d < b; ++d) {
      const int64_t n = ds[size_t(d)].constant();
      batch = checked_mul(c, batch, n, "the batch dims' element count");
      at[size_t(d)] = n;
    }
    c.check_elements(batch, "the batch offsets");
    std::vector<int64_t> offs(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) offs[size_t(i)] = checked_mul(c, i, per.constant(), "a batch offset");
    lin = tessera::add(lin, host_tensor(offs, c.example(at), kInt64));
  }
  Sizes flat{b > 0 ? SymSize(checked_mul(c, batch, per.constant(), "the gathered rows")) : per};
  flat.insert(flat.end(), ds.begin() + b + k, ds.end());
  Tensor rows = tessera::index_select(reshape_to(c, x, flat), 0, reshape_to(c, lin, {product(is, 0, size_t(q - 1))}));
  c.out(0, reshape_to(c, rows, out));
}

void ScatterND(NodeCtx& c) {
  Tensor x = c.in(0), idx = c.in(1), upd = c.in(2);
  const int64_t r = x.dim(), q = idx.dim();
  const Sizes ds = c.sizes(x), is = c.sizes(idx), us = c.sizes(upd);
  if (q < 1) c.fail("indices must have rank >= 1");
  const int64_t k = static_dim(c, is.back(), "the indices' last dim");
  if (k < 1 || k > r) c.fail("index tuples of " + std::to_string(k) + " entries for data of rank " + std::to_string(r));
  const Sizes dims(ds.begin(), ds.begin() + k);
  int dynamic = 0;
  for (const SymSize& d : dims) dynamic += d.is_constant() ? 0 : 1;
  if (dynamic > 1) c.fail("indexes several dynamic dims of data (their rows cannot be split back into them); fix them with ImportOptions::fixed_dims");
  Sizes want(is.begin(), is.end() - 1);
  want.insert(want.end(), ds.begin() + k, ds.end());
  bool ok = want.size() == us.size();
  for (size_t i = 0; ok && i < us.size(); ++i) ok = c.same(want[i], us[i]);
  if (!ok) c.fail("updates do not have the shape indices.shape[:-1] + data.shape[k:]");
  // data as [rows, data.shape[k:]], updates as [m, data.shape[k:]] (the trailing dims kept whole:
  // symbolic ones stay plain symbols); the index is each update's row, broadcast.
  Sizes flat_sizes{product(dims, 0, dims.size())}, src_sizes{product(is, 0, size_t(q - 1))}, at{src_sizes[0]};
  flat_sizes.insert(flat_sizes.end(), ds.begin() + k, ds.end());
  src_sizes.insert(src_sizes.end(), ds.begin() + k, ds.end());
  at.resize(src_sizes.size(), SymSize(int64_t(1)));
  Tensor index = broadcast_to(c, reshape_to(c, linear_index(c, idx, dims), at), src_sizes);
  Tensor flat = reshape_to(c, x, flat_sizes), src = reshape_to(c, upd, src_sizes);
  const std::string red = c.attr_string("reduction", "none");
  static const std::map<std::string, std::string> kReduce = {{"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
  Tensor y;
  if (red == "none") {
    y = tessera::scatter(flat, 0, index, src);
  } else {
    auto it = kReduce.find(red);
    if (it == kReduce.end()) c.fail("reduction '" + red + "' is not supported (none, add, mul, max, min are)");
    y = tessera::scatter_reduce(flat, 0, index, src, it->second, true);
  }
  c.out(0, reshape_to(c, y, ds));
}

void TensorScatter(NodeCtx& c) {
  Tensor past = c.in(0), upd = c.in(1);
  const int64_t r = past.dim();
  const int64_t axis = norm_axis(c, c.attr_int("axis", -2), r);
  if (axis == 0) c.fail("axis 0 is the batch dim; the sequence axis must follow it");
  const std::string mode = c.attr_string("mode", "linear");
  if (mode != "linear" && mode != "circular") c.fail("mode '" + mode + "' is not supported (linear, circular are)");
  const Sizes ps = c.sizes(past), us = c.sizes(upd);
  if (int64_t(us.size()) != r) c.fail("update has rank " + std::to_string(us.size()) + ", the cache " + std::to_string(r));
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && !c.same(ps[size_t(d)], us[size_t(d)])) c.fail("update's dim " + std::to_string(d) + " is " + us[size_t(d)].str() + ", the cache's " + ps[size_t(d)].str());
  const SymSize s = us[size_t(axis)];
  // The cache position of update row j of batch b: write_indices[b] + j (mod the cache length).
  Tensor pos = tessera::add(reshape_to(c, counting(c, s, "the update's positions"), one_hot_sizes(r, axis, s)),
                            c.has(2) ? reshape_to(c, c.in(2).to(kInt64), one_hot_sizes(r, 0, ps[0])) : host_scalar(0, kInt64));
  if (mode == "circular") {
    const int64_t n = static_dim(c, ps[size_t(axis)], "the cache's sequence dim");
    if (n <= 0) c.fail("an empty cache");
    pos = tessera::remainder(pos, host_scalar(double(n), kInt64));
  }
  c.out(0, tessera::scatter(past, axis, broadcast_to(c, pos, us), upd));
}

// ---- Einsum

// Labels: a letter's code, or kEllipsis + position for the dims "..." stands for (aligned right).
constexpr int kEllipsis = 1000;

struct Operand {
  Tensor t;
  std::vector<int> labels;
};

std::vector<int> parse_term(const NodeCtx& c, const std::string& eq, const std::string& term, int64_t rank, int64_t ell_total,
                            bool output) {
  std::vector<int> letters;
  int64_t ell_at = -1;
  for (size_t i = 0; i < term.size();) {
    if (term.compare(i, 3, "...") == 0) {
      if (ell_at >= 0) c.fail("equation '" + eq + "' has two ellipses in one term");
      ell_at = int64_t(letters.size());
      i += 3;
    } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
      letters.push_back(term[i++]);
    } else {
      c.fail("equation '" + eq + "' has the character '" + std::string(1, term[i]) + "' (letters, ',', '->' and '...' are allowed)");
    }
  }
  const int64_t ell = output ? (ell_at >= 0 ? ell_total : 0) : rank - int64_t(letters.size());
  if (!output && (ell < 0 || (ell > 0 && ell_at < 0)))
    c.fail("equation '" + eq + "': term '" + term + "' names " + std::to_string(letters.size()) + " dims of a rank-" + std::to_string(rank) + " input");
  std::vector<int> out(letters.begin(), letters.begin() + std::max<int64_t>(ell_at, 0));
  for (int64_t j = 0; j < ell; ++j) out.push_back(kEllipsis + int(ell_total - ell + j));
  out.insert(out.end(), letters.begin() + std::max<int64_t>(ell_at, 0), letters.end());
  return out;
}

std::vector<int64_t> positions(const std::vector<int>& labels, const std::vector<int>& want) {
  std::vector<int64_t> p;
  for (int l : want) p.push_back(std::find(labels.begin(), labels.end(), l) - labels.begin());
  return p;
}

bool contains(const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); }

// Sums out the dims of `o` whose labels are not in `keep`.
void sum_out(Operand& o, const std::vector<int>& keep) {
  std::vector<int64_t> dims;
  std::vector<int> left;
  for (size_t i = 0; i < o.labels.size(); ++i) {
    if (contains(keep, o.labels[i])) left.push_back(o.labels[i]);
    else dims.push_back(int64_t(i));
  }
  if (dims.empty()) return;
  o.t = tessera::sum(o.t, dims, false);
  o.labels = left;
}

// A label given twice in one operand takes the diagonal: the off-diagonal masked to 0, one dim summed.
void take_diagonals(const NodeCtx& c, const std::string& eq, Operand& o) {
  for (size_t p = 0; p < o.labels.size(); ++p) {
    for (size_t q = p + 1; q < o.labels.size();) {
      if (o.labels[q] != o.labels[p]) {
        ++q;
        continue;
      }
      const Sizes s = c.sizes(o.t);
      if (!c.same(s[p], s[q])) c.fail("equation '" + eq + "' takes a diagonal of dims of sizes " + s[p].str() + " and " + s[q].str());
      Tensor i = counting(c, s[p], "a diagonal's positions");
      Tensor mask = tessera::eq(reshape_to(c, i, one_hot_sizes(int64_t(s.size()), int64_t(p), s[p])),
                                reshape_to(c, i, one_hot_sizes(int64_t(s.size()), int64_t(q), s[q])));
      o.t = tessera::sum(tessera::where(mask, o.t, host_scalar(0.0, o.t.dtype())), {int64_t(q)}, false);
      o.labels.erase(o.labels.begin() + int64_t(q));
    }
  }
}

Tensor permuted(const Tensor& t, const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return t.permute(perm);
  return t;
}

int dynamic_count(const Sizes& s) {
  int n = 0;
  for (const SymSize& x : s) n += x.is_constant() ? 0 : 1;
  return n;
}

// a and b contracted into one operand whose labels are those of `keep` they have, by one matmul:
// [batch, left, contracted] x [batch, 1.., contracted, right]. The left dims stay whole (matmul
// broadcasts over them) and the right ones are flattened: a view may split a flattened group into at
// most one dynamic dim, so the operand with the more dynamic free dims goes left.
Operand contract(const NodeCtx& c, const std::string& eq, Operand a, Operand b, const std::vector<int>& keep) {
  std::vector<int> keep_a = keep, keep_b = keep;
  keep_a.insert(keep_a.end(), b.labels.begin(), b.labels.end());
  keep_b.insert(keep_b.end(), a.labels.begin(), a.labels.end());
  sum_out(a, keep_a);
  sum_out(b, keep_b);
  auto size_of = [&](const Operand& o, int l) {
    return c.sizes(o.t)[size_t(std::find(o.labels.begin(), o.labels.end(), l) - o.labels.begin())];
  };
  auto free_sizes = [&](const Operand& o, const Operand& other) {
    Sizes s;
    for (int l : o.labels)
      if (!contains(other.labels, l)) s.push_back(size_of(o, l));
    return s;
  };
  // A contracted dim of size 1 on one side (a broadcast ellipsis dim) is summed on each side alone.
  std::vector<int> unit;
  for (int l : a.labels)
    if (contains(b.labels, l) && !contains(keep, l) && !c.same(size_of(a, l), size_of(b, l)) &&
        (size_of(a, l).maybe_constant() == std::optional<int64_t>(1) || size_of(b, l).maybe_constant() == std::optional<int64_t>(1)))
      unit.push_back(l);
  if (!unit.empty()) {
    std::vector<int> rest = keep;
    for (int l : a.labels)
      if (!contains(unit, l)) rest.push_back(l);
    for (int l : b.labels)
      if (!contains(unit, l)) rest.push_back(l);
    sum_out(a, rest);
    sum_out(b, rest);
  }
  if (dynamic_count(free_sizes(b, a)) > dynamic_count(free_sizes(a, b))) std::swap(a, b);
  std::vector<int> batch, left, con, right;
  for (int l : a.labels) (contains(b.labels, l) ? (contains(keep, l) ? batch : con) : left).push_back(l);
  for (int l : b.labels)
    if (!contains(a.labels, l)) right.push_back(l);
  Sizes ra, rb, out, left_s, right_s, con_s;
  for (int l : batch) {
    const SymSize x = size_of(a, l), y = size_of(b, l);
    if (!c.same(x, y) && x.maybe_constant() != std::optional<int64_t>(1) && y.maybe_constant() != std::optional<int64_t>(1))
      c.fail("equation '" + eq + "': a dim of sizes " + x.str() + " and " + y.str());
    ra.push_back(x);
    rb.push_back(y);
    out.push_back(x.maybe_constant() == std::optional<int64_t>(1) ? y : x);
  }
  for (int l : con) {
    if (!c.same(size_of(a, l), size_of(b, l)))
      c.fail("equation '" + eq + "' contracts dims of sizes " + size_of(a, l).str() + " and " + size_of(b, l).str());
    con_s.push_back(size_of(a, l));
  }
  for (int l : left) left_s.push_back(size_of(a, l));
  for (int l : right) right_s.push_back(size_of(b, l));
  if (right_s.size() > 1 && dynamic_count(right_s) > 1)
    c.fail("equation '" + eq + "' leaves several dynamic dims on both operands (" + std::to_string(dynamic_count(left_s)) + " and " +
           std::to_string(dynamic_count(right_s)) + "); fix them with ImportOptions::fixed_dims");
  std::vector<int> la = batch, lb = batch;
  la.insert(la.end(), left.begin(), left.end());
  la.insert(la.end(), con.begin(), con.end());
  lb.insert(lb.end(), con.begin(), con.end());
  lb.insert(lb.end(), right.begin(), right.end());
  const SymSize cp = product(con_s, 0, con_s.size());
  ra.insert(ra.end(), left_s.begin(), left_s.end());
  if (left_s.empty()) ra.push_back(SymSize(int64_t(1)));
  ra.push_back(cp);
  for (size_t i = 1; i < left_s.size(); ++i) rb.push_back(SymSize(int64_t(1)));
  rb.push_back(cp);
  rb.push_back(product(right_s, 0, right_s.size()));
  Tensor ma = reshape_to(c, permuted(a.t, positions(a.labels, la)), ra);
  Tensor mb = reshape_to(c, permuted(b.t, positions(b.labels, lb)), rb);
  out.insert(out.end(), left_s.begin(), left_s.end());
  out.insert(out.end(), right_s.begin(), right_s.end());
  Operand r{reshape_to(c, tessera::matmul(ma, mb), out), batch};
  r.labels.insert(r.labels.end(), left.begin(), left.end());
  r.labels.insert(r.labels.end(), right.begin(), right.end());
  return r;
}

void Einsum(NodeCtx& c) {
  std::string eq;
  for (char ch : c.attr_string("equation", "")) {
    if (!std::isspace(static_cast<unsigned char>(ch))) eq += ch;
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t begin = 0;;) {
    const size_t comma = lhs.find(',', begin);
    terms.push_back(lhs.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (int(terms.size()) != c.num_inputs()) c.fail("equation '" + eq + "' has " + std::to_string(terms.size()) + " terms for " + std::to_string(c.num_inputs()) + " inputs");
  std::vector<Operand> ops;
  int64_t ell_total = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    Tensor t = c.in(int(i));
    int64_t letters = 0;
    for (char ch : terms[i]) letters += std::isalpha(static_cast<unsigned char>(ch)) ? 1 : 0;
    if (terms[i].find("...") != std::string::npos) ell_total = std::max(ell_total, t.dim() - letters);
    ops.push_back({t, {}});
  }
  bool any_ellipsis = false;
  for (size_t i = 0; i < terms.size(); ++i) {
    ops[i].labels = parse_term(c, eq, terms[i], ops[i].t.dim(), ell_total, false);
    any_ellipsis = any_ellipsis || terms[i].find("...") != std::string::npos;
  }
  std::vector<int> out;
  if (arrow != std::string::npos) {
    out = parse_term(c, eq, eq.substr(arrow + 2), 0, ell_total, true);
    for (size_t i = 0; i < out.size(); ++i) {
      bool found = false;
      for (const Operand& o : ops) found = found || contains(o.labels, out[i]);
      if (!found || std::count(out.begin(), out.end(), out[i]) > 1)
        c.fail("equation '" + eq + "': an output label is " + (found ? "given twice" : "not in any input"));
    }
  } else {  // implicit: the ellipsis dims, then the letters given once, in alphabetical order
    for (int64_t j = 0; any_ellipsis && j < ell_total; ++j) out.push_back(kEllipsis + int(j));
    std::map<int, int> count;
    for (const Operand& o : ops)
      for (int l : o.labels) count[l] += l < kEllipsis ? 1 : 0;
    for (const auto& [l, n] : count)
      if (n == 1) out.push_back(l);
  }
  for (Operand& o : ops) take_diagonals(c, eq, o);
  Operand cur = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::vector<int> keep = out;  // what the output or a later operand needs
    for (size_t j = i + 1; j < ops.size(); ++j) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    cur = contract(c, eq, cur, ops[i], keep);
  }
  sum_out(cur, out);
  c.out(0, permuted(cur.t, positions(cur.labels, out)));
}

// ---- depth and space

// The 4-D input, blocksize and mode that DepthToSpace and SpaceToDepth share.
struct BlockArgs {
  Tensor x;
  int64_t bs;
  std::string mode;
  Sizes s;
};
BlockArgs block_args(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() != 4) c.fail("the input must be 4-D (N, C, H, W)");
  const int64_t bs = c.attr_int("blocksize", 0);
  if (bs <= 0 || bs > 4096) c.fail("blocksize " + std::to_string(bs) + " must be in [1, 4096]");
  std::string mode = c.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") c.fail("mode '" + mode + "' is not supported (DCR, CRD are)");
  Sizes s = c.sizes(x);
  return {x, bs, std::move(mode), std::move(s)};
}

void DepthToSpace(NodeCtx& c) {
  const auto [x, bs, mode, s] = block_args(c);
  const int64_t ch = static_dim(c, s[1], "the channel dim");
  if (ch % (bs * bs) != 0) c.fail("channels " + std::to_string(ch) + " are not a multiple of blocksize^2 (" + std::to_string(bs * bs) + ")");
  const SymSize b(bs), cc(ch / (bs * bs));
  Tensor t = mode == "DCR" ? reshape_to(c, x, {s[0], b, b, cc, s[2], s[3]}).permute({0, 3, 4, 1, 5, 2})
                           : reshape_to(c, x, {s[0], cc, b, b, s[2], s[3]}).permute({0, 1, 4, 2, 5, 3});
  c.out(0, reshape_to(c, t, {s[0], cc, s[2] * b, s[3] * b}));
}

void SpaceToDepth(NodeCtx& c) {
  const auto [x, bs, mode, s] = block_args(c);
  for (int d : {2, 3})
    if (static_dim(c, s[size_t(d)], "spatial dim " + std::to_string(d)) % bs != 0)
      c.fail("dim " + std::to_string(d) + " (" + s[size_t(d)].str() + ") is not a multiple of blocksize " + std::to_string(bs));
  const SymSize b(bs), h(s[2].constant() / bs), w(s[3].constant() / bs);
  Tensor t = reshape_to(c, x, {s[0], s[1], h, b, w, b});
  t = mode == "DCR" ? t.permute({0, 3, 5, 1, 2, 4}) : t.permute({0, 1, 3, 5, 2, 4});
  c.out(0, reshape_to(c, t, {s[0], s[1] * b * b, h, w}));
}

// ---- crops, sequences, bit casts

void CenterCropPad(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t r = x.dim();
  const std::vector<int64_t> shape = c.const_ints(1);
  std::vector<int64_t> axes = c.attr_ints("axes", {});
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  if (shape.size() != axes.size()) c.fail("shape has " + std::to_string(shape.size()) + " entries for " + std::to_string(axes.size()) + " axes");
  std::vector<int64_t> lo(size_t(r), 0), hi(size_t(r), 0);
  std::vector<bool> seen(size_t(r), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = norm_axis(c, axes[i], r);
    if (seen[size_t(a)]) c.fail("axis " + std::to_string(axes[i]) + " is given twice");
    seen[size_t(a)] = true;
    const int64_t n = static_dim(c, c.sizes(x)[size_t(a)], "cropped or padded dim " + std::to_string(a));
    const int64_t want = shape[i];
    if (want < 0) c.fail("a negative target size " + std::to_string(want));
    if (want < n) {
      const int64_t start = (n - want) / 2;
      x = tessera::slice_copy(x, a, start, start + want, 1);
    } else if (want > n) {
      lo[size_t(a)] = (want - n) / 2;
      hi[size_t(a)] = want - n - lo[size_t(a)];
    }
  }
  std::vector<int64_t> list;  // the contract's order: last dim first
  int64_t first = 0;
  while (first < r && lo[size_t(first)] == 0 && hi[size_t(first)] == 0) ++first;
  for (int64_t d = r - 1; d >= first; --d) {
    list.push_back(lo[size_t(d)]);
    list.push_back(hi[size_t(d)]);
  }
  if (!list.empty()) {
    int64_t numel = 1;  // the padded output, at the example's sizes (the target sizes are untrusted)
    for (size_t d = 0; d < size_t(r); ++d) {
      const int64_t n = c.example(c.sizes(x)[d]);
      if (n + lo[d] + hi[d] > kMaxImportElements) c.fail("a target size of more than " + std::to_string(kMaxImportElements));
      numel = checked_mul(c, numel, n + lo[d] + hi[d], "the padded output's element count");
    }
    c.check_elements(numel, "the padded output");
    x = tessera::pad(x, list, "constant", 0.0);
  }
  c.out(0, x);
}

void ReverseSequence(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t r = x.dim();
  if (r < 2) c.fail("the input must have rank >= 2");
  const int64_t ba = norm_axis(c, c.attr_int("batch_axis", 1), r), ta = norm_axis(c, c.attr_int("time_axis", 0), r);
  if (ba == ta || ba > 1 || ta > 1) c.fail("batch_axis and time_axis must be 0 and 1 in some order");
  const Sizes s = c.sizes(x);
  // Position t of batch b reads len[b] - 1 - t below len[b], else t: one gather along time.
  Tensor pos = reshape_to(c, counting(c, s[size_t(ta)], "the time positions"), one_hot_sizes(r, ta, s[size_t(ta)]));
  Tensor len = reshape_to(c, c.in(1).to(kInt64), one_hot_sizes(r, ba, s[size_t(ba)]));
  Tensor src = tessera::where(tessera::lt(pos, len), tessera::sub(tessera::sub(len, host_scalar(1, kInt64)), pos), pos);
  c.out(0, tessera::gather(x, ta, broadcast_to(c, src, s)));
}

void BitCast(NodeCtx& c) {
  const int64_t to = c.attr_int("to", 0);
  std::optional<DType> dt = dtype_of_onnx(int32_t(to));
  if (!dt) c.fail("bit cast to ONNX type " + std::to_string(to) + ", which Tessera has no dtype for");
  Tensor x = c.in(0);
  const DType from = x.dtype();
  if (itemsize(from) != itemsize(*dt)) c.fail("the input and output types differ in width");
  if (from == *dt) return c.out(0, x);
  if (c.val(0).constant) {  // reinterpreted on the host
    ExcludeDispatchKeyGuard plain(kExportKey);
    Tensor src = x.cpu().contiguous();
    Tensor y = tessera::empty(src.sizes(), tessera::dtype(*dt));
    if (src.nbytes()) std::memcpy(y.raw_data_ptr(), src.raw_data_ptr(), src.nbytes());
    return c.out(0, constant_val(y));
  }
  // Between integer types of one width (and from bool), a cast keeps the bits (two's complement).
  const bool int_like = !is_floating(from) && !is_floating(*dt) && *dt != kBool;
  if (!int_like)
    c.fail("a bit cast from " + std::string(dtype_name(from)) + " to " + std::string(dtype_name(*dt)) +
           " needs a reinterpreting view, which the op contract does not have (only constant inputs are folded)");
  c.out(0, x.to(*dt));
}

// ---- ops whose output size depends on the data: folded on constants

const Tensor& constant_input(const NodeCtx& c, int i, const char* what) {
  const Val& v = c.val(i);
  if (!v.constant && !v.ints) c.fail(std::string(what) + " must be a constant: the output's size depends on its values, and a program's sizes are fixed at import");
  c.in(i);  // known integers materialised (a symbolic one fails, named)
  return v.t;
}

void NonZero(NodeCtx& c) {
  const Tensor& x = constant_input(c, 0, "the input");
  if (x.dim() == 0) c.fail("a scalar input is not supported");
  ExcludeDispatchKeyGuard plain(kExportKey);
  Tensor d = x.cpu().to(kFloat64).contiguous();
  const double* p = d.const_data_ptr<double>();
  const std::vector<int64_t> sizes = d.sizes().vec();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < d.numel(); ++i)
    if (p[i] != 0) hits.push_back(i);
  const int64_t r = int64_t(sizes.size()), n = int64_t(hits.size());
  c.check_elements(checked_mul(c, r, n, "the output"), "the output");
  std::vector<int64_t> out(static_cast<size_t>(r * n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t rem = hits[size_t(j)];
    for (int64_t k = r - 1; k >= 0; --k) {
      out[size_t(k * n + j)] = rem % sizes[size_t(k)];
      rem /= sizes[size_t(k)];
    }
  }
  c.out(0, constant_val(host_tensor(out, {r, n}, kInt64)));
}

void Compress(NodeCtx& c) {
  Tensor x = c.in(0);
  if (constant_input(c, 1, "the condition").dim() != 1) c.fail("the condition must be 1-D");
  const std::vector<double> cond = c.const_doubles(1);
  std::vector<int64_t> idx;
  for (size_t i = 0; i < cond.size(); ++i)
    if (cond[i] != 0) idx.push_back(int64_t(i));
  int64_t axis = 0;
  if (c.has_attr("axis")) {
    axis = norm_axis(c, c.attr_int("axis", 0), x.dim());
  } else {
    x = reshape_to(c, x, {product(c.sizes(x), 0, size_t(x.dim()))});
  }
  const SymSize n = c.sizes(x)[size_t(axis)];
  if (n.is_constant() && int64_t(cond.size()) > n.constant() && !idx.empty() && idx.back() >= n.constant())
    c.fail("the condition selects index " + std::to_string(idx.back()) + " of a dim of size " + n.str());
  c.out(0, tessera::index_select(x, axis, host_tensor(idx, {int64_t(idx.size())}, kInt64)));
}

// Unique on a constant: slices along `axis` (or the elements) compared lexicographically, as
// np.unique does; sorted=0 orders them by first occurrence.
void Unique(NodeCtx& c) {
  const Tensor& x = constant_input(c, 0, "the input");
  const bool sorted = c.attr_int("sorted", 1) != 0;
  ExcludeDispatchKeyGuard plain(kExportKey);
  Tensor flat = x.cpu().contiguous();
  int64_t axis = 0;
  if (c.has_attr("axis")) axis = norm_axis(c, c.attr_int("axis", 0), x.dim());
  else flat = flat.reshape({flat.numel()});
  const std::vector<int64_t> sizes = flat.sizes().vec();
  const int64_t n = sizes[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= sizes[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < sizes.size(); ++d) inner *= sizes[d];
  // Element e of slice k in np.unique's order (the axis moved first, the rest row-major).
  const bool fp = is_floating(flat.dtype());
  Tensor vals = flat.to(fp ? kFloat64 : kInt64);
  auto less = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t ea = (o * n + a) * inner + i, eb = (o * n + b) * inner + i;
        if (fp) {
          const double va = vals.const_data_ptr<double>()[ea], vb = vals.const_data_ptr<double>()[eb];
          if (va != vb) return va < vb;
        } else {
          const int64_t va = vals.const_data_ptr<int64_t>()[ea], vb = vals.const_data_ptr<int64_t>()[eb];
          if (va != vb) return va < vb;
        }
      }
    return false;
  };
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), less);
  std::vector<int64_t> first, counts, group(static_cast<size_t>(n));  // per unique slice (sorted), per input slice
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || less(order[i - 1], order[i])) {
      first.push_back(order[i]);
      counts.push_back(0);
    }
    group[size_t(order[i])] = int64_t(first.size()) - 1;
    ++counts.back();
  }
  std::vector<int64_t> rank(first.size());  // output position of each sorted unique slice
  std::iota(rank.begin(), rank.end(), int64_t(0));
  if (!sorted) {
    std::vector<int64_t> by_first(first.size());
    std::iota(by_first.begin(), by_first.end(), int64_t(0));
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return first[size_t(a)] < first[size_t(b)]; });
    std::vector<int64_t> f2, c2;
    for (size_t k = 0; k < by_first.size(); ++k) {
      rank[size_t(by_first[k])] = int64_t(k);
      f2.push_back(first[size_t(by_first[k])]);
      c2.push_back(counts[size_t(by_first[k])]);
    }
    first = f2;
    counts = c2;
  }
  std::vector<int64_t> inverse(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) inverse[size_t(i)] = rank[size_t(group[size_t(i)])];
  const int64_t u = int64_t(first.size());
  c.out(0, constant_val(tessera::index_select(flat, axis, host_tensor(first, {u}, kInt64)).contiguous()));
  c.out(1, constant_val(host_tensor(first, {u}, kInt64)));
  c.out(2, constant_val(host_tensor(inverse, {n}, kInt64)));
  c.out(3, constant_val(host_tensor(counts, {u}, kInt64)));
}

}  // namespace

void add_more_index_converters(ConverterTable& t) {
  t["GatherND"] = GatherND; t["ScatterND"] = ScatterND; t["TensorScatter"] = TensorScatter; t["Einsum"] = Einsum;
  t["DepthToSpace"] = DepthToSpace; t["SpaceToDepth"] = SpaceToDepth; t["CenterCropPad"] = CenterCropPad;
  t["ReverseSequence"] = ReverseSequence; t["BitCast"] = BitCast; t["NonZero"] = NonZero; t["Compress"] = Compress;
  t["Unique"] = Unique;
}

}  // namespace tessera::onnx::detail
