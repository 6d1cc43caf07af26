#include "compute/conv_rows.h"

#include <algorithm>

#include "compute/parallel.h"
#include "etnp/threadpool.h"

namespace etnp::compute {

size_t conv_row_chunks(size_t batch, size_t out_h) {
  return std::min(batch * out_h, std::max<size_t>(1, ThreadPool::current().num_threads()));
}

void for_each_conv_row_chunk(size_t batch, size_t out_h, size_t chunks, size_t work,
                             const std::function<void(size_t chunk, size_t image, size_t y0, size_t y1)>& rows) {
  const size_t total_rows = batch * out_h;
  auto run_chunk = [&](size_t chunk) {
    const size_t r0 = total_rows * chunk / chunks, r1 = total_rows * (chunk + 1) / chunks;
    for (size_t r = r0; r < r1;) {
      const size_t b = r / out_h, y = r % out_h;
      const size_t y_end = std::min(out_h, y + (r1 - r));
      rows(chunk, b, y, y_end);
      r += y_end - y;
    }
  };
  if (chunks == 1 || work < kParallelWork) {
    for (size_t i = 0; i < chunks; ++i) run_chunk(i);
    return;
  }
  ThreadPool::current().parallel_for(chunks, 1, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) run_chunk(i);
  });
}

}  // namespace etnp::compute
