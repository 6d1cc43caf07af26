#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "cli/cli.h"
#include "cli/json_output.h"
#include "etnp/backend.h"
#include "etnp/threadpool.h"

namespace etnp::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double pos = p * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace

int run_bench(Args& args) {
  LoadOptions options = load_options_from(args);
  const std::string method_name = args.value("--method", "forward");
  const auto warmup = static_cast<int>(args.int_value("--warmup", 5, 0, 1000000));
  const auto iters = static_cast<int>(args.int_value("--iters", 50, 1, 100000000));
  const auto threads = static_cast<int>(args.int_value("--threads", 0, 0, 1024));
  const auto shape_specs = args.values("--shape");
  const auto input_specs = args.values("--input");  // stored inputs (e.g. a KV-cache position); filled otherwise
  const std::string fill = fill_value(args, "random");
  const auto seed = static_cast<uint64_t>(args.int_value("--seed", 0));
  const bool json = args.has_flag("--json");
  const bool profile = args.has_flag("--profile");
  const bool want_progress = progress_wanted(args);
  const auto files = args.positionals();
  if (files.size() != 1) usage_error("bench takes one .pte file");

  if (threads > 0) ThreadPool::global().set_num_threads(static_cast<size_t>(threads));
  options.enable_profiling = profile;
  const auto load_start = Clock::now();
  Program program = load_program(files[0], options);
  auto method = program.load_method(method_name);
  const double load_ms = ms_since(load_start);

  PreparedInputs inputs = prepare_inputs(method->meta(), expand_input_specs(input_specs), fill, seed,
                                         parse_shapes(shape_specs, method->meta().inputs.size()),
                                         integer_input_uses(files[0], method_name));
  for (int i = 0; i < warmup; ++i) method->execute(inputs.values);
  method->clear_profile_events();

  // A bar on stderr when it is a terminal (not with --json or --no-progress), for runs long enough to watch.
  Progress bar(iters, want_progress && !json && iters >= 20);
  std::vector<double> times;
  times.reserve(static_cast<size_t>(iters));
  // Per-operator time, from the profile events of the timed iterations; separately, the parts of the delegate
  // calls that their backends reported (their time is already in the DELEGATE_CALL lines). Summed after each
  // iteration, outside its time, and cleared: kept whole, the events of a long run grew by megabytes a second.
  std::map<std::string, std::pair<double, int>> totals, part_totals;
  auto absorb_profile_events = [&] {
    std::string backend;  // of the last DELEGATE_CALL: the parts that follow it are its own
    for (const auto& ev : method->profile_events()) {
      if (!ev.delegate_part && ev.name.rfind("DELEGATE_CALL ", 0) == 0) backend = ev.name.substr(14);
      auto& t = ev.delegate_part ? part_totals[backend + ": " + ev.name]
                                 : totals[ev.folded ? ev.name + " (folded at load)" : ev.name];
      t.first += static_cast<double>(ev.end_ns - ev.start_ns) / 1e6 / iters;
      t.second += 1;
    }
    method->clear_profile_events();
  };
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    method->execute(inputs.values);
    times.push_back(ms_since(start));
    if (profile) absorb_profile_events();
    if (i % std::max(1, iters / 50) == 0 || i + 1 == iters) bar.update(i + 1);
  }
  bar.finish();
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = percentile(sorted, 0.5);
  const size_t nthreads = ThreadPool::global().num_threads();
  double planned_mb = 0;
  for (int64_t b : method->meta().planned_buffer_sizes) planned_mb += static_cast<double>(b) / (1 << 20);
  const double load_time_mb = static_cast<double>(method->load_time_bytes()) / (1 << 20);
  // Packed weights shared through the weight cache are counted there, once, and in no method.
  const PackedWeightCacheStats shared = packed_weight_cache_stats();
  const double shared_mb = static_cast<double>(shared.bytes) / (1 << 20);

  using Totals = std::vector<std::pair<std::string, std::pair<double, int>>>;
  Totals per_op, per_part;
  if (profile) {
    auto sorted_totals = [&](std::map<std::string, std::pair<double, int>>& m) {
      for (auto& [name, t] : m) t.second = (t.second + iters - 1) / iters;  // calls per run
      Totals v(m.begin(), m.end());
      std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
      return v;
    };
    per_op = sorted_totals(totals);
    per_part = sorted_totals(part_totals);
  }

  if (json) {
    double mean = 0;
    for (double t : times) mean += t;
    mean /= static_cast<double>(times.size());
    Json out;
    out["file"] = files[0];
    out["method"] = method_name;
    out["min_ms"] = sorted.front();
    out["median_ms"] = median;
    out["p90_ms"] = percentile(sorted, 0.9);
    out["p99_ms"] = percentile(sorted, 0.99);
    out["max_ms"] = sorted.back();
    out["mean_ms"] = mean;
    out["throughput_per_s"] = 1000.0 / median;
    out["iters"] = iters;
    out["warmup"] = warmup;
    out["threads"] = nthreads;
    out["load_ms"] = load_ms;
    out["peak_rss_mb"] = peak_rss_mb();
    out["planned_mb"] = planned_mb;
    out["load_time_mb"] = load_time_mb;
    out["shared_packed_mb"] = shared_mb;
    if (profile) {
      auto rows = [](const Totals& totals) {
        Json list = Json::array();
        for (const auto& [name, t] : totals) {
          list.push_back({{"name", name}, {"ms_per_run", t.first}, {"calls_per_run", t.second}});
        }
        return list;
      };
      out["profile"] = rows(per_op);
      out["delegate_profile"] = rows(per_part);
    }
    print_json(out);
    return 0;
  }
  std::printf("%s (%s), %d iterations after %d warm-up, %zu threads\n", files[0].c_str(), method_name.c_str(), iters,
              warmup, nthreads);
  std::printf("  min %.3f ms  median %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms\n", sorted.front(), median,
              percentile(sorted, 0.9), percentile(sorted, 0.99), sorted.back());
  std::printf("  throughput %.1f runs/s, load %.1f ms, peak RSS %.1f MiB\n", 1000.0 / median, load_ms, peak_rss_mb());
  std::printf("  memory: planned %.2f MiB, made at load %.2f MiB (packed weights, folded constants, unplanned tensors, "
              "delegates' copies and buffers)",
              planned_mb, load_time_mb);
  if (shared.entries > 0) {
    std::printf(", shared packed weights %.2f MiB in %zu entries (weight cache, counted once)", shared_mb,
                shared.entries);
  }
  std::printf("\n");
  if (profile) {
    double total = 0;
    for (const auto& p : per_op) total += p.second.first;
    auto print = [&](const Totals& rows) {
      for (const auto& p : rows) {
        std::printf("    %8.3f ms %5.1f%%  %6d calls/run  %s\n", p.second.first,
                    total > 0 ? 100.0 * p.second.first / total : 0.0, p.second.second, p.first.c_str());
      }
    };
    std::printf("  time per run by operator / delegate (sorted):\n");
    print(per_op);
    if (!per_part.empty()) {
      std::printf("  inside the delegate calls, by node and what ran it (sorted; %% of the whole run):\n");
      print(per_part);
    }
  }
  return 0;
}

}  // namespace etnp::cli
