// Slot files on disk for the unit tests of the disk tier's file handling: a sequence-state file
// as llama.cpp writes it, and reading, writing and listing files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace slot_file_fixtures {

// Magic ("ggsq"), version, token count, tokens, then `state` bytes of state.
inline std::vector<char> state_file(std::uint32_t tokens, std::size_t state) {
    std::vector<char> out;
    const auto u32 = [&](std::uint32_t v) {
        for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    u32(0x67677371u);
    u32(3);
    u32(tokens);
    for (std::uint32_t t = 0; t < tokens; ++t) u32(t);
    out.insert(out.end(), state, 'z');
    return out;
}

inline void write(const std::filesystem::path& p, const std::vector<char>& b) {
    std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

inline std::vector<char> read(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The names in `dir`, sorted.
inline std::vector<std::string> files_in(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace slot_file_fixtures
