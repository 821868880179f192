"""Built-in data for S-NIAH so it runs offline: public-domain prose for the essay haystack, and key words.

`ESSAY` is the essay haystack used when no folder of .txt essays is given (RULER uses Paul
Graham's essays, which cannot ship here): two US public-domain texts, the Gettysburg Address
(1863) and the Declaration of Independence (1776). Longer contexts repeat it, as RULER repeats
its essays. `ADJECTIVES` x `NOUNS` form the "adjective-noun" needle keys (RULER draws them from
the `wonderwords` lists; a fixed built-in list keeps seeded samples identical on every machine).
"""

GETTYSBURG_ADDRESS = """Four score and seven years ago our fathers brought forth on this continent, a new nation, \
conceived in Liberty, and dedicated to the proposition that all men are created equal.

Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived and so \
dedicated, can long endure. We are met on a great battle-field of that war. We have come to dedicate a portion \
of that field, as a final resting place for those who here gave their lives that that nation might live. It is \
altogether fitting and proper that we should do this.

But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- this ground. The \
brave men, living and dead, who struggled here, have consecrated it, far above our poor power to add or detract. \
The world will little note, nor long remember what we say here, but it can never forget what they did here. It \
is for us the living, rather, to be dedicated here to the unfinished work which they who fought here have thus \
far so nobly advanced. It is rather for us to be here dedicated to the great task remaining before us -- that \
from these honored dead we take increased devotion to that cause for which they gave the last full measure of \
devotion -- that we here highly resolve that these dead shall not have died in vain -- that this nation, under \
God, shall have a new birth of freedom -- and that government of the people, by the people, for the people, \
shall not perish from the earth.
"""

DECLARATION_OF_INDEPENDENCE = """When in the Course of human events, it becomes necessary for one people to \
dissolve the political bands which have connected them with another, and to assume among the powers of the \
earth, the separate and equal station to which the Laws of Nature and of Nature's God entitle them, a decent \
respect to the opinions of mankind requires that they should declare the causes which impel them to the \
separation.

We hold these truths to be self-evident, that all men are created equal, that they are endowed by their Creator \
with certain unalienable Rights, that among these are Life, Liberty and the pursuit of Happiness. That to secure \
these rights, Governments are instituted among Men, deriving their just powers from the consent of the governed. \
That whenever any Form of Government becomes destructive of these ends, it is the Right of the People to alter or \
to abolish it, and to institute new Government, laying its foundation on such principles and organizing its \
powers in such form, as to them shall seem most likely to effect their Safety and Happiness. Prudence, indeed, \
will dictate that Governments long established should not be changed for light and transient causes; and \
accordingly all experience hath shewn, that mankind are more disposed to suffer, while evils are sufferable, than \
to right themselves by abolishing the forms to which they are accustomed. But when a long train of abuses and \
usurpations, pursuing invariably the same Object evinces a design to reduce them under absolute Despotism, it is \
their right, it is their duty, to throw off such Government, and to provide new Guards for their future \
security. Such has been the patient sufferance of these Colonies; and such is now the necessity which constrains \
them to alter their former Systems of Government. The history of the present King of Great Britain is a history \
of repeated injuries and usurpations, all having in direct object the establishment of an absolute Tyranny over \
these States. To prove this, let Facts be submitted to a candid world.

He has refused his Assent to Laws, the most wholesome and necessary for the public good. He has forbidden his \
Governors to pass Laws of immediate and pressing importance, unless suspended in their operation till his Assent \
should be obtained; and when so suspended, he has utterly neglected to attend to them. He has refused to pass \
other Laws for the accommodation of large districts of people, unless those people would relinquish the right of \
Representation in the Legislature, a right inestimable to them and formidable to tyrants only. He has called \
together legislative bodies at places unusual, uncomfortable, and distant from the depository of their public \
Records, for the sole purpose of fatiguing them into compliance with his measures. He has dissolved \
Representative Houses repeatedly, for opposing with manly firmness his invasions on the rights of the people. He \
has refused for a long time, after such dissolutions, to cause others to be elected; whereby the Legislative \
powers, incapable of Annihilation, have returned to the People at large for their exercise; the State remaining \
in the mean time exposed to all the dangers of invasion from without, and convulsions within. He has endeavoured \
to prevent the population of these States; for that purpose obstructing the Laws for Naturalization of \
Foreigners; refusing to pass others to encourage their migrations hither, and raising the conditions of new \
Appropriations of Lands. He has obstructed the Administration of Justice, by refusing his Assent to Laws for \
establishing Judiciary powers. He has made Judges dependent on his Will alone, for the tenure of their offices, \
and the amount and payment of their salaries. He has erected a multitude of New Offices, and sent hither swarms of \
Officers to harrass our people, and eat out their substance. He has kept among us, in times of peace, Standing \
Armies without the Consent of our legislatures. He has affected to render the Military independent of and \
superior to the Civil power.

In every stage of these Oppressions We have Petitioned for Redress in the most humble terms: Our repeated \
Petitions have been answered only by repeated injury. A Prince whose character is thus marked by every act which \
may define a Tyrant, is unfit to be the ruler of a free people. Nor have We been wanting in attentions to our \
Brittish brethren. We have warned them from time to time of attempts by their legislature to extend an \
unwarrantable jurisdiction over us. We have reminded them of the circumstances of our emigration and settlement \
here. We have appealed to their native justice and magnanimity, and we have conjured them by the ties of our \
common kindred to disavow these usurpations, which, would inevitably interrupt our connections and \
correspondence. They too have been deaf to the voice of justice and of consanguinity. We must, therefore, \
acquiesce in the necessity, which denounces our Separation, and hold them, as we hold the rest of mankind, \
Enemies in War, in Peace Friends.

We, therefore, the Representatives of the united States of America, in General Congress, Assembled, appealing to \
the Supreme Judge of the world for the rectitude of our intentions, do, in the Name, and by Authority of the good \
People of these Colonies, solemnly publish and declare, That these United Colonies are, and of Right ought to be \
Free and Independent States; that they are Absolved from all Allegiance to the British Crown, and that all \
political connection between them and the State of Great Britain, is and ought to be totally dissolved; and that \
as Free and Independent States, they have full Power to levy War, conclude Peace, contract Alliances, establish \
Commerce, and to do all other Acts and Things which Independent States may of right do. And for the support of \
this Declaration, with a firm reliance on the protection of divine Providence, we mutually pledge to each other \
our Lives, our Fortunes and our sacred Honor.
"""

ESSAY = GETTYSBURG_ADDRESS + "\n" + DECLARATION_OF_INDEPENDENCE

ADJECTIVES = """abundant adorable agreeable amused ancient angry anxious bashful beautiful bitter black bold brave
breezy bright broad brown calm careful cheerful chilly clever cloudy clumsy cold colossal cool crooked curious
damp dark deep delightful dizzy dry dusty eager early elegant empty enchanting faint fancy fierce flat fresh
friendly gentle giant gifted glamorous gleaming golden graceful green grumpy handsome happy harsh heavy helpful
hollow huge humble hungry icy jolly kind large lazy little lively lonely loud lucky magnificent mellow misty
modern narrow nervous noisy obedient odd old orange plain polite precious proud purple quick quiet rapid rare
red rich round rusty scary shaggy shiny short shy silent silly silver slow small smooth soft sparkling spicy
splendid steep sticky strange striped strong sweet swift tall tame tender thirsty tiny tough tricky ugly wet
wide wild windy wise witty wooden yellow young zealous""".split()

NOUNS = """acorn airport anchor apple arrow attic badge bakery balloon banana basket beach bean bell bicycle
blanket boat bone book bottle bracelet bread brick bridge brush bucket butter button cabin cactus cake camera
candle canoe canyon carpet castle cave chair cheese cherry chimney circle clock cloud coat coffee comet compass
cookie copper corn cottage crayon crown cup curtain daisy desk diamond dolphin door dragon drum eagle engine
feather fence fiddle flag flute forest fountain garden gate glacier glove grape guitar hammer harbor hat helmet
hill honey horse island jacket jar jewel kettle kite ladder lamp lantern lemon letter lighthouse lion map marble
meadow mirror moon mountain needle nest ocean olive orchard oven owl paddle palace pancake pebble pencil piano
pillow planet pocket pond potato quilt rabbit rainbow river robot rocket saddle sail sandwich scarf shell ship
shoe spoon squirrel star statue stone sugar teapot tiger tower train tree trumpet tunnel umbrella valley violin
wagon wallet whistle window wolf zebra""".split()
