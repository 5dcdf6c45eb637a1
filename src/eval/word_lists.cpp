#include "eval/word_lists.h"

#include <algorithm>
#include <mutex>
#include <sstream>

namespace sieve::eval {
namespace {

// The lists are written for Sieve. Overlaps between them (e.g. "orange", "olive") are fine:
// each list is de-duplicated on its own and all_words() de-duplicates the union.
constexpr std::string_view k_adjectives = R"(
able absent acidic active adorable afraid agile alert alive amber ample ancient angry anxious
arctic arid aromatic ashen awake awkward azure bald balmy bare basic bashful beige bitter bland
bleak blond blue blunt bold bony bored bossy brave brief bright brisk brittle broad bronze brown
bubbly bulky bumpy busy calm candid careful casual cheap cheerful chilly chubby civil clean clear
clever cloudy clumsy coarse cold comic common cool cozy crafty crazy creamy crimson crisp crooked
cruel crunchy cuddly curious curly curved cute damp dapper daring dark dear decent deep dense
devoted dim direct dirty distant dizzy dull dusty eager early earnest easy elastic elder elegant
empty endless epic equal exact exotic faded faint fair faithful fancy fast fatal fearless feeble
fertile fierce filthy fine firm flat flawless fluffy fond foolish formal fragile frail frank free
fresh friendly frosty frozen frugal full funny fuzzy gentle giant gifted giddy glad gleaming glossy
golden good graceful grand grassy grateful gray greasy great green grim gritty grumpy guilty hairy
handy happy hard harsh hasty heavy hefty helpful high hollow honest hopeful hot huge humble humid
hungry husky icy ideal idle immense indigo inner ironic itchy ivory jagged jolly joyful juicy jumpy
keen kind knotty large late lavish lazy leafy lean level light likely limp little lively livid
local lofty lonely long loose loud lovely loyal lucky lumpy lush mad magenta major mellow merry
messy mighty mild minor misty modern modest moist moody mossy muddy murky mute narrow nasty native
neat needy nervous new nice nimble noble noisy normal nosy numb oaken odd oily old olive open
orange ornate outer oval pale patient peaceful perfect petty pink plain plump polite poor portly
posh precious pretty prickly proud puny pure purple quaint quick quiet rainy rapid rare raw ready
real red regal remote rich rigid ripe robust rocky rosy rough round royal rude rural rusty sacred
sad salty sandy scarce scarlet serene shaggy shallow sharp shiny short shy silent silky silly
silver simple sleepy slender slim slow small smart smoky smooth snowy soft soggy solid sour spare
sparkling spicy spiky spotless square stable stale steady steep sticky stiff stormy strange strict
strong sturdy subtle sudden sunny super sweet swift tall tame tangy tart tender tense thick thin
thirsty tidy tiny tired tough tranquil tricky true twin ugly unique upbeat urban useful vague vain
valid vast velvet violet vivid warm wary watery weak wealthy weary wet white whole wicked wide wild
windy wise witty wooden woolly worn yellow young zany zealous zesty
)";

constexpr std::string_view k_nouns = R"(
ant badger bat bear beaver bee beetle bison boar buffalo camel canary cat cheetah chicken clam
cobra cod cougar cow coyote crab crane cricket crow deer dingo dog dolphin donkey dove dragonfly
duck eagle eel elk emu falcon ferret finch flamingo fox frog gazelle gecko gerbil giraffe goat
goose gorilla grouse gull hamster hare hawk hedgehog heron hippo hornet horse hound hyena ibis
iguana jackal jaguar jay kangaroo kitten koala lamb lark lemur leopard lion lizard llama lobster
lynx magpie mallard mole mongoose moose moth mouse mule newt octopus opossum orca ostrich otter owl
ox oyster panda panther parrot peacock pelican penguin pheasant pig pigeon pony poodle porcupine
puffin puma quail rabbit raccoon ram rat raven reindeer robin rooster salmon sardine seal shark
sheep shrimp skunk sloth snail snake sparrow spider squid squirrel stork swan tiger toad trout tuna
turkey turtle viper vulture walrus wasp weasel whale wolf wombat woodpecker worm yak zebra
anchor anvil apron armchair arrow axe backpack bag ball balloon banner barrel basket bathtub
battery beacon bell belt bench bicycle blanket blender bookcase boot bottle bowl box bracelet broom
brush bucket buckle button cabinet cable calendar camera candle cane canoe cap card carpet cart
chain chair chalk chisel clock cloak coat coin collar comb compass cork couch cradle crayon crown
cup curtain cushion dagger desk diary dish doll door drawer drum easel envelope eraser fan faucet
feather fence fiddle flag flashlight flask flute folder fork frame funnel globe glove goblet guitar
hammer hammock hanger harp hat helmet hinge hook horn hose jar jacket kettle key kite knife ladder
ladle lamp lantern latch lens lever lock locket magnet mallet map marble mask mat medal mirror
mitten mop mug nail napkin needle net notebook oar oven padlock paddle pail paintbrush pan pencil
pendant piano pillow pin pipe pitcher plate pliers plow pocket pot pouch puzzle quill quilt racket
radio rake ribbon ring robe rope rug ruler saddle sail satchel saucer saw scarf scissors screw
shawl shelf shield shovel skate sled slipper sock sofa spade spatula spoon stamp stapler statue
stool stove strap string suitcase sweater sword table tambourine teapot telescope tent thimble
thread ticket tie tongs torch towel toy tray trophy trowel trumpet trunk tub umbrella vase vest
violin wagon wallet wand wardrobe watch wheel whip whistle window wrench yarn zipper
almond apple apricot avocado bagel banana barley bean berry biscuit bread broccoli brownie butter
cabbage cake candy carrot cashew celery cereal cheese cherry chestnut chili chocolate cinnamon
coconut coffee cookie corn cracker cranberry cream cucumber cupcake curry custard date donut
dumpling egg fig garlic ginger grape gravy guava honey jam jelly kiwi leek lemon lentil lettuce
lime mango maple melon muffin mushroom mustard noodle nutmeg oat olive onion orange pancake papaya
parsley pasta pastry pea peach peanut pear pepper pickle pie pineapple pistachio pizza plum popcorn
potato pretzel pudding pumpkin radish raisin rice salad salsa sandwich sausage soup spinach squash
stew strawberry sugar syrup taco tea toast tomato turnip vanilla waffle walnut yogurt
acorn bay beach boulder branch brook canyon cave cliff cloud coast comet coral creek crystal delta
desert dune dust field fjord flower fog forest fountain galaxy garden geyser glacier grass grove
gulf harbor hill island jungle lagoon lake leaf marsh meadow mist moon moss mountain oasis ocean
orchard pebble petal planet pond prairie puddle rainbow reef ridge river rock root rose sand
savanna seed shore sky snowflake spring star stone storm stream summit sun swamp thorn thunder
tide tree tulip valley volcano waterfall wave willow wind
abbey airport alley arcade attic bakery balcony barn basement bridge bungalow cabin cafe castle
cathedral cellar chapel cottage courtyard dock factory farm garage gate greenhouse hallway hangar
hospital hotel hut kitchen library lighthouse lobby market mill monastery museum palace pantry park
pavilion pier plaza porch quarry ranch school shed shop stadium station studio temple theater tower
tunnel villa warehouse windmill workshop
airship ambulance barge bus carriage ferry glider helicopter jeep kayak locomotive motorcycle raft
rocket scooter ship submarine taxi tractor train tram truck van yacht
acrobat actor admiral artist astronaut athlete author baker banker barber bishop captain carpenter
chef clown coach cowboy dancer detective doctor drummer editor engineer farmer firefighter
fisherman gardener guard hunter inventor janitor jester judge king knight lawyer librarian mayor
mechanic merchant miner monk musician nurse painter pilot pirate plumber poet potter priest prince
princess professor queen sailor scientist sculptor sheriff singer soldier surgeon tailor teacher
tourist wizard writer
advice alarm album alphabet angle arch army art autumn award ballad ballet bargain battle blossom
blueprint breeze bubble budget cactus canvas carnival carton celebration chapter chorus circle
circus climate clue concert contest copper cotton cube dance dawn debate diamond dinner dream echo
emerald engine estate fable festival fiction flame flight forecast fortune fossil fragment gallery
gem gravel harvest holiday horizon idea ink iron jewel journey jigsaw kingdom label legend lesson
letter limit linen lyric machine melody memory meteor metal midnight minute moment motor mural
mystery nectar noon novel oath orbit opera palette parade pattern pearl picnic plan poem portrait
pottery prism pyramid quartz rhythm riddle ritual ruby rumor saga sapphire scroll season shadow
signal silk sketch slogan sonnet spark sphere spiral sponge stanza story summer symbol symphony
talent theory thought timber token topaz treasure triangle trick tune twilight universe verse
victory voyage whisper winter wonder zephyr
)";

constexpr std::string_view k_verbs = R"(
accept achieve adapt add admire advise agree allow amuse announce appear applaud arrange arrive ask
attach bake balance bathe beg behave believe blink boil borrow bounce breathe build burn bury
calculate carry carve catch celebrate change chase chat cheer chew choose clap climb collect
compare complain cook copy count cover crawl cross cry cycle decide deliver describe design dig
discover dive divide drag draw drift drink drive drop earn eat enjoy enter escape examine explain
explore fetch fill find fix float flow fold follow forget forgive gather giggle glide glow grab
greet grin grow guess guide hang help hike hop hope hug hum hunt hurry imagine improve invent
invite join joke juggle jump kick kneel knit knock laugh launch lead learn lend lift listen march
melt mend mix move nod notice obey offer order pack paint pass pause peel pick plant play polish
pour practice praise pray prepare promise protect pull push race reach read relax remember repair
repeat reply rescue rest return ride rinse roar roll row rub run rush scatter scribble search serve
sew shake share shine shiver shout sing sip sit skip sleep slide smell smile sneeze snore solve
sort sparkle speak spell spin splash sprint squeeze stack stare start stay steer stir stretch
stroll study surf swim swing talk taste teach tease thank throw tickle travel trust tumble twirl
twist type unlock unpack vanish visit wade wait walk wander wash weave wiggle win wink wish wobble
work worry wrap write yawn yell zoom borrow bloom brew chop dash fling gallop hover leap nibble perch
ponder quarrel ramble sketch soar stumble sweep tiptoe trudge wobble yodel
)";

std::vector<std::string> parse_list(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  std::string w;
  while (in >> w) out.push_back(w);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Syllables for made-up words: 15 consonants x 5 vowels.
constexpr std::string_view k_consonants = "bdfghklmnprstvz";
constexpr std::string_view k_vowels = "aeiou";
constexpr uint64_t k_syllables = 15 * 5;
constexpr uint64_t k_three_syllables = k_syllables * k_syllables * k_syllables;  // 421875

// The j-th candidate: three syllables, visited in a scrambled order so that neighbouring
// indices do not share their first syllables (7919 is coprime to 421875 = 3^3 * 5^6).
// Beyond the three-syllable space a fourth syllable is added.
std::string pseudo_candidate(uint64_t j) {
  uint64_t k = (j % k_three_syllables) * 7919 % k_three_syllables;
  uint64_t extra = j / k_three_syllables;
  std::string w;
  for (int s = 0; s < 3; ++s) {
    const uint64_t syl = k % k_syllables;
    k /= k_syllables;
    w += k_consonants[syl / 5];
    w += k_vowels[syl % 5];
  }
  while (extra > 0) {  // practically never: 421875 words cover any context length
    const uint64_t syl = (extra - 1) % k_syllables;
    extra = (extra - 1) / k_syllables;
    w += k_consonants[syl / 5];
    w += k_vowels[syl % 5];
  }
  return w;
}

}  // namespace

std::span<const std::string> adjectives() {
  static const std::vector<std::string> v = parse_list(k_adjectives);
  return v;
}
std::span<const std::string> nouns() {
  static const std::vector<std::string> v = parse_list(k_nouns);
  return v;
}
std::span<const std::string> verbs() {
  static const std::vector<std::string> v = parse_list(k_verbs);
  return v;
}

std::span<const std::string> all_words() {
  static const std::vector<std::string> v = [] {
    std::string all;
    for (auto list : {adjectives(), nouns(), verbs()}) {
      for (const std::string& w : list) all += w + " ";
    }
    return parse_list(all);
  }();
  return v;
}

std::string pseudo_word(uint64_t i) {
  // Candidates equal to a real word are skipped; the mapping i -> word is cached so that it
  // stays a pure function of i.
  static std::mutex mu;
  static std::vector<std::string> cache;
  static uint64_t next_candidate = 0;
  std::lock_guard lock(mu);
  const auto words = all_words();
  while (cache.size() <= i) {
    std::string w = pseudo_candidate(next_candidate++);
    if (!std::binary_search(words.begin(), words.end(), w)) cache.push_back(std::move(w));
  }
  return cache[i];
}

std::string_view noise_words(int64_t n) {
  if (n <= 0) return {};
  size_t end = 0;
  for (int64_t w = 0; w < n; ++w) {
    end = noise_sentence.find(' ', end + (w > 0 ? 1 : 0));
    if (end == std::string_view::npos) return noise_sentence;
  }
  return noise_sentence.substr(0, end);
}

}  // namespace sieve::eval
