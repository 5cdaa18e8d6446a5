// benches/kernels/delta_rule_across.cu run on the CPU (see cpu_emulation.h), for
// tests/python/test_kernels.py. Reads the kernel's inputs from DIR as raw little-endian f32
// files, writes its outputs there.
//
//   delta_rule_across_cpu DIR BH N DV KEEP
//   in:  DIR/values.f32 DIR/keys_read.f32 DIR/k_to_end.f32 DIR/chunk_decay.f32 DIR/first.f32
//   out: DIR/states.f32 DIR/news.f32 and, where KEEP is 1, DIR/last.f32
#include "cpu_emulation.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

extern "C" {
alignas(16) float4 shared4[(128 * 64 + 64 * 64 + 128 * 68) / 4 + 1024];
}

#include "../../benches/kernels/delta_rule_across.cu"

static_assert(sizeof(shared4) >= SHARED_BYTES, "the emulated shared memory holds the kernel's");

static std::vector<float> read(const std::string& path, size_t count) {
    std::vector<float> data(count);
    std::ifstream in(path, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(data.data()), count * sizeof(float))) {
        std::fprintf(stderr, "%s: expected %zu floats\n", path.c_str(), count);
        std::exit(2);
    }
    return data;
}

static void write(const std::string& path, const std::vector<float>& data) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
}

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s DIR BH N DV KEEP\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const int bh = std::atoi(argv[2]), n = std::atoi(argv[3]), dv = std::atoi(argv[4]), keep = std::atoi(argv[5]);
    if (dv % TILE != 0) {
        std::fprintf(stderr, "DV must be a multiple of %d\n", TILE);
        return 2;
    }
    const size_t chunks = size_t(bh) * n;
    auto values = read(dir + "/values.f32", chunks * CHUNK * dv);
    auto keys_read = read(dir + "/keys_read.f32", chunks * CHUNK * DK);
    auto k_to_end = read(dir + "/k_to_end.f32", chunks * CHUNK * DK);
    auto chunk_decay = read(dir + "/chunk_decay.f32", chunks);
    auto first = read(dir + "/first.f32", size_t(bh) * DK * dv);
    std::vector<float> states(chunks * DK * dv), news(chunks * CHUNK * dv), last(size_t(bh) * DK * dv);
    emulate_launch({unsigned(bh), unsigned(dv / TILE), 1}, {THREADS, 1, 1}, [&] {
        delta_rule_across(values.data(), keys_read.data(), k_to_end.data(), chunk_decay.data(), first.data(),
                          states.data(), news.data(), keep ? last.data() : nullptr, n, dv, keep);
    });
    write(dir + "/states.f32", states);
    write(dir + "/news.f32", news);
    if (keep) write(dir + "/last.f32", last);
    return 0;
}
